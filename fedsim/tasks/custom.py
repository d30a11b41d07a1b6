"""A loss function of your own as a task: ``loss(output, target)`` returns the batch's mean loss."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from fedsim.tasks.base import Task

LossFn = Callable[[Tensor, Tensor], Tensor]


class LossTask(Task):
    """Trains on ``fn`` and reports its mean as the metric ``loss``; no accuracy, and no per-sample losses
    (so it trains on the sequential executor)."""

    metric = "loss"

    def __init__(self, fn: LossFn, name: str | None = None) -> None:
        self.fn = fn
        self.name = name or str(getattr(fn, "__name__", "loss"))

    def loss(self, output: Tensor, target: Tensor) -> Tensor:
        return self.fn(output, target)

    def sums(self, output: Tensor, target: Tensor) -> Tensor:
        value = self.fn(output, target).detach().double().reshape(())
        n = value.new_tensor(float(target.shape[0]))
        return torch.stack([value * n, torch.zeros_like(n), n])
