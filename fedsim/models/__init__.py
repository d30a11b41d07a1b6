"""The model zoo: logistic regression, MLP, and a small CNN with group, batch or no normalisation."""

from __future__ import annotations

import torch
from torch import nn

from fedsim.config import ModelConfig
from fedsim.models.cnn import cnn
from fedsim.models.mlp import mlp
from fedsim.models.replica import Replica

__all__ = ["Replica", "build_model"]


def build_model(cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int, seed: int) -> nn.Module:
    """A freshly initialised model; the same ``seed`` gives the same initial weights."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if cfg.kind == "logistic":
            return mlp(input_shape, num_classes, ())
        if cfg.kind == "mlp":
            return mlp(input_shape, num_classes, cfg.hidden)
        return cnn(input_shape, num_classes, cfg.channels, cfg.norm, cfg.groups)
