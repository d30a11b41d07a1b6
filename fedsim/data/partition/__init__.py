"""Partitioners: split a labelled training set among clients (index arrays, disjoint, covering)."""

from __future__ import annotations

import numpy as np

from fedsim.config import (
    ConfigError,
    DirichletPartition,
    IidPartition,
    LabelSkewPartition,
    Partition,
    QuantitySkewPartition,
    ShardsPartition,
)
from fedsim.data.partition.dirichlet import dirichlet
from fedsim.data.partition.iid import iid
from fedsim.data.partition.label_skew import label_skew
from fedsim.data.partition.quantity_skew import quantity_skew
from fedsim.data.partition.shards import shards

__all__ = ["dirichlet", "iid", "label_skew", "partition", "quantity_skew", "shards"]


def partition(cfg: Partition, labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Split ``labels``' indices among ``num_clients`` as ``cfg`` says; every client gets at least one sample."""
    if num_clients > len(labels):
        raise ConfigError(f"data.clients={num_clients} exceeds the {len(labels)} training samples")
    if isinstance(cfg, IidPartition):
        parts = iid(labels, num_clients, rng)
    elif isinstance(cfg, DirichletPartition):
        parts = dirichlet(labels, num_clients, cfg.alpha, rng)
    elif isinstance(cfg, ShardsPartition):
        if num_clients * cfg.labels_per_client > len(labels):
            raise ConfigError(
                f"data.partition.labels_per_client={cfg.labels_per_client}: {num_clients} clients need "
                f"{num_clients * cfg.labels_per_client} shards but there are {len(labels)} samples"
            )
        parts = shards(labels, num_clients, cfg.labels_per_client, rng)
    elif isinstance(cfg, LabelSkewPartition):
        parts = label_skew(labels, num_clients, cfg.skew, rng)
    elif isinstance(cfg, QuantitySkewPartition):
        parts = quantity_skew(labels, num_clients, cfg.alpha, cfg.min_samples, rng)
    else:  # pragma: no cover - the config union is closed
        raise ConfigError(f"unknown partition {cfg!r}")
    empty = [k for k, p in enumerate(parts) if len(p) == 0]
    if empty:
        raise ConfigError(
            f"data.partition: {len(empty)} of {num_clients} clients got no samples (first: client {empty[0]}); "
            "use fewer clients or a milder skew"
        )
    return parts
