"""``build_dataset``: the one entry point the engine uses to get its federated dataset."""

from __future__ import annotations

from fedsim.config import DataConfig, DigitsData, FileData, RandomData, SyntheticData
from fedsim.data.base import FederatedDataset
from fedsim.data.digits import digits
from fedsim.data.files import user_file
from fedsim.data.random import RandomDataset
from fedsim.data.synthetic import synthetic


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
