"""Datasets and partitioners. ``build_dataset`` (:mod:`fedsim.data.build`) is the one entry point the engine uses.

The package itself imports nothing heavy: an edge device reads its sentences (:mod:`fedsim.data.sst2`) and
partitions them (:mod:`fedsim.data.partition`) with numpy alone, while the array datasets need torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ArrayDataset", "ClientData", "FederatedDataset", "build_dataset"]


def __getattr__(name: str) -> Any:
    """``from fedsim.data.build import build_dataset`` loads the torch-backed datasets on first use only."""
    if name == "build_dataset":
        from fedsim.data.build import build_dataset

        return build_dataset
    if name in ("ArrayDataset", "ClientData", "FederatedDataset"):
        from fedsim.data import base

        return getattr(base, name)
    raise AttributeError(f"module 'fedsim.data' has no attribute {name!r}")
