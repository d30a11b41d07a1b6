"""MNIST from its IDX files (LeCun et al.): big-endian headers, then uint8 pixels or labels; gzip or plain."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import torch

from fedsim.config import ConfigError, MnistData
from fedsim.data.base import ArrayDataset, ClientData
from fedsim.data.partition import partition

IMAGES, LABELS = 2051, 2049  # the IDX magic numbers


def read_idx(path: Path, magic: int) -> np.ndarray:
    """The array in one IDX file (``path`` or ``path.gz``): (count, rows, cols) images or (count,) labels."""
    found = next((p for p in (path.with_name(path.name + ".gz"), path) if p.is_file()), None)
    if found is None:
        raise ConfigError(f"{path}(.gz): MNIST file not found")
    raw = gzip.decompress(found.read_bytes()) if found.suffix == ".gz" else found.read_bytes()
    dims = 3 if magic == IMAGES else 1
    header = 4 + 4 * dims
    if len(raw) < header or int.from_bytes(raw[:4], "big") != magic:
        raise ConfigError(f"{found}: not an IDX file of {'images' if magic == IMAGES else 'labels'}")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims))
    if len(raw) - header != int(np.prod(shape)):
        raise ConfigError(f"{found}: header says {list(shape)}, file holds {len(raw) - header} values")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def mnist(cfg: MnistData, seed: int) -> ArrayDataset:
    d = Path(cfg.dir)
    x = read_idx(d / "train-images-idx3-ubyte", IMAGES).reshape(-1, 1, 28, 28).astype(np.float32) / 255.0
    y = read_idx(d / "train-labels-idx1-ubyte", LABELS).astype(np.int64)
    tx = read_idx(d / "t10k-images-idx3-ubyte", IMAGES).reshape(-1, 1, 28, 28).astype(np.float32) / 255.0
    ty = read_idx(d / "t10k-labels-idx1-ubyte", LABELS).astype(np.int64)
    if len(x) != len(y) or len(tx) != len(ty):
        raise ConfigError(f"{d}: image and label counts differ")
    parts = partition(cfg.partition, y, cfg.clients, np.random.default_rng(seed))
    test = ClientData(torch.from_numpy(tx), torch.from_numpy(ty))
    return ArrayDataset(x, y, parts, test, num_classes=10)
