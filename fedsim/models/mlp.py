"""Multinomial logistic regression and the multi-layer perceptron."""

from __future__ import annotations

import math
from itertools import pairwise

from torch import nn


def mlp(input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...]) -> nn.Sequential:
    """Flatten, then ``hidden`` ReLU layers, then a linear classifier; ``hidden=()`` is logistic regression."""
    widths = [math.prod(input_shape), *hidden]
    layers: list[nn.Module] = [nn.Flatten()]
    for fan_in, fan_out in pairwise(widths):
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], num_classes))
    return nn.Sequential(*layers)
