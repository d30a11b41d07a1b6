"""pfl-research's benchmark shapes, written once for both sides of bench/vs_pfl.py: the data (synthetic, of the
benchmark's shape: enough for speed, and no download), the model and its initialisation. This file imports
only numpy and torch, so that pfl's own virtual environment can import it too.

``cifar10``: pfl's benchmarks/image_classification/configs/baseline.yaml: ``simple_cnn`` (two 3x3
convolutions of 32 and 64 channels, a 2x2 max-pool, dropout, a 128-unit dense layer, dropout, 10 outputs; 1.6M
parameters; inputs 32x32x3 channels-last, transposed inside the model as pfl's ``Transpose2D`` does), Glorot
uniform weights, 1,000 users x 50 images, cohort 50, one local epoch in batches of 10 at lr 0.1, central SGD at
lr 1.0, every user weighted alike.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class Shape:
    """One workload: ``users`` x ``per_user`` samples of ``input_shape``, ``classes`` labels, ``cohort`` users a
    round, ``epochs`` local epochs in batches of ``batch`` at ``local_lr``, central SGD at ``central_lr``."""

    name: str
    users: int
    per_user: int
    input_shape: tuple[int, ...]
    classes: int
    cohort: int
    epochs: int
    batch: int
    local_lr: float
    central_lr: float


SHAPES = {
    "cifar10": Shape("cifar10", 1000, 50, (32, 32, 3), 10, 50, 1, 10, 0.1, 1.0),
}


def synthetic(shape: Shape, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(users * per_user, *input_shape) float32 inputs in [0, 1) and int64 labels, the same for a seed on either
    side: user u holds rows [u * per_user, (u + 1) * per_user)."""
    rng = np.random.default_rng(seed)
    n = shape.users * shape.per_user
    x = rng.random((n, *shape.input_shape), dtype=np.float32)
    y = rng.integers(0, shape.classes, size=n).astype(np.int64)
    return x, y


class Transpose2D(nn.Module):
    """Channels-last images (N, H, W, C) to the (N, C, H, W) convolutions take, as pfl's model does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 3, 1, 2)


def simple_cnn(shape: Shape, seed: int = 0) -> nn.Module:
    """pfl's ``simple_cnn`` with its Glorot-uniform weights, drawn from ``seed``."""
    torch.manual_seed(seed)
    side, channels = shape.input_shape[0], shape.input_shape[-1]
    flatten = ((side - 4) // 2) ** 2 * 64
    model = nn.Sequential(
        Transpose2D(),
        nn.Conv2d(channels, 32, kernel_size=(3, 3)),
        nn.ReLU(),
        nn.Conv2d(32, 64, kernel_size=(3, 3)),
        nn.ReLU(),
        nn.MaxPool2d((2, 2)),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(flatten, 128),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(128, shape.classes),
    )
    for m in model.modules():
        if isinstance(m, nn.Conv2d | nn.Linear):
            nn.init.xavier_uniform_(m.weight)
    return model


MODELS = {"cifar10": simple_cnn}
