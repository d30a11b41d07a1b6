"""Datasets and partitioners. ``build_dataset`` is the one entry point the engine uses."""

from __future__ import annotations

from fedsim.config import DataConfig, DigitsData, FileData, RandomData, SyntheticData
from fedsim.data.base import ArrayDataset, ClientData, FederatedDataset
from fedsim.data.digits import digits
from fedsim.data.files import user_file
from fedsim.data.random import RandomDataset
from fedsim.data.synthetic import synthetic

__all__ = ["ArrayDataset", "ClientData", "FederatedDataset", "build_dataset"]


def build_dataset(cfg: DataConfig, seed: int) -> FederatedDataset:
    """The configured dataset, partitioned among ``cfg.clients``; deterministic in (cfg, seed)."""
    if isinstance(cfg, DigitsData):
        return digits(cfg, seed)
    if isinstance(cfg, SyntheticData):
        return synthetic(cfg, seed)
    if isinstance(cfg, FileData):
        return user_file(cfg, seed)
    if isinstance(cfg, RandomData):
        return RandomDataset(cfg, seed)
    raise TypeError(f"unknown dataset config {cfg!r}")  # pragma: no cover - the union is closed
