"""scikit-learn's bundled handwritten digits: 1,797 8x8 images, 10 classes, no download."""

from __future__ import annotations

import numpy as np

from fedsim.config import DigitsData
from fedsim.data.base import ArrayDataset
from fedsim.data.split import federate


def digits(cfg: DigitsData, seed: int) -> ArrayDataset:
    """Images as float32 (1, 8, 8) in [0, 1]."""
    from sklearn.datasets import load_digits  # scikit-learn takes a second to import: only when used

    bunch = load_digits()
    x = (bunch.images / 16.0).astype(np.float32)[:, None, :, :]
    y = bunch.target.astype(np.int64)
    return federate(x, y, cfg.clients, cfg.partition, cfg.test_fraction, seed)
