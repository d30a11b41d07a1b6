"""Turning one labelled array into a federated dataset: hold out a global test split, partition the rest."""

from __future__ import annotations

import numpy as np
import torch

from fedsim.config import ConfigError, Partition
from fedsim.data.base import ArrayDataset, ClientData
from fedsim.data.partition import partition


def federate(
    x: np.ndarray,
    y: np.ndarray,
    num_clients: int,
    scheme: Partition,
    test_fraction: float,
    seed: int,
) -> ArrayDataset:
    """A stratified (when every class has two samples) test split of ``test_fraction``, then the partition."""
    rng = np.random.default_rng(seed)
    values = y.dtype.kind == "f"  # regression targets: no classes to stratify or partition by
    if values and scheme.kind not in ("iid", "quantity_skew"):
        raise ConfigError(f"data.partition.kind={scheme.kind} splits by class; regression targets have none")
    counts = None if values else np.bincount(y)
    stratify = y if counts is not None and counts[counts > 0].min() >= 2 else None
    from sklearn.model_selection import train_test_split  # a second to import: only for datasets that split

    train_idx, test_idx = train_test_split(
        np.arange(len(y)), test_size=test_fraction, random_state=seed, stratify=stratify
    )
    parts = partition(scheme, y[train_idx], num_clients, rng)
    test = ClientData(torch.as_tensor(x[test_idx], dtype=torch.float32), torch.as_tensor(y[test_idx]))
    num_classes = 1 if values else int(y.max()) + 1  # a regression's output width
    return ArrayDataset(x[train_idx], y[train_idx], parts, test, num_classes=num_classes)
