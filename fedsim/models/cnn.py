"""A small CNN with a choice of normalisation.

Hsieh et al. (ICML 2020) show BatchNorm breaks under label skew because each client's batch statistics differ,
and GroupNorm recovers most of the loss; the ``norm`` switch exists to reproduce that.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn

from fedsim.config import ConfigError
from fedsim.models.pool import MaxPool2x2

Norm = Literal["group", "batch", "none"]


def _norm(kind: Norm, channels: int, groups: int) -> nn.Module:
    if kind == "group":
        return nn.GroupNorm(groups, channels)
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    return nn.Identity()


def cnn(
    input_shape: tuple[int, ...],
    num_classes: int,
    channels: tuple[int, int] = (16, 32),
    norm: Norm = "group",
    groups: int = 4,
) -> nn.Sequential:
    """Two blocks of conv3x3 -> norm -> ReLU -> 2x2 max-pool, then a linear classifier.

    ``input_shape`` is (channels, height, width); a (height, width) image (a greyscale column) and a flat
    (features,) input of a square number of pixels are viewed as one channel.
    """
    if len(input_shape) == 2:
        input_shape = (1, *input_shape)
    if len(input_shape) == 1:
        side = math.isqrt(input_shape[0])
        if side * side != input_shape[0]:
            raise ConfigError(f"model.kind=cnn needs image input; got {input_shape[0]} flat features")
        input_shape = (1, side, side)
    if len(input_shape) != 3:
        raise ConfigError(
            f"model.kind=cnn needs (channels, height, width) or (height, width) input; got shape {input_shape}"
        )
    c1, c2 = channels
    body = nn.Sequential(
        nn.Flatten(),  # (batch, height, width) and (batch, features) alike
        nn.Unflatten(1, input_shape),
        nn.Conv2d(input_shape[0], c1, 3, padding=1),
        _norm(norm, c1, groups),
        nn.ReLU(),
        MaxPool2x2(),
        nn.Conv2d(c1, c2, 3, padding=1),
        _norm(norm, c2, groups),
        nn.ReLU(),
        MaxPool2x2(),
        nn.Flatten(),
    )
    with torch.no_grad():
        features = body(torch.zeros(2, *input_shape, device="cpu").flatten(1)).shape[1]  # built on the host
    return nn.Sequential(nn.Flatten(), *body, nn.Linear(features, num_classes))
