"""Regression: mean squared error; the output has the target's shape (or one trailing 1 more)."""

from __future__ import annotations

from torch import Tensor

from fedsim.tasks.base import Task, TaskMismatch, shape_of


def _fit(output: Tensor, target: Tensor) -> Tensor:
    """``output`` shaped as ``target``: a ``(batch, 1)`` prediction of a ``(batch,)`` target drops its 1."""
    if output.dim() == target.dim() + 1 and output.shape[-1] == 1:
        return output.squeeze(-1)
    return output


class Regression(Task):
    name = "regression"
    metric = "mse"

    def per_sample(self, output: Tensor, target: Tensor) -> Tensor:
        err = (_fit(output, target) - target.to(output.dtype)) ** 2
        return err.flatten(1).mean(1) if err.dim() > 1 else err

    def check(self, output: Tensor, target: Tensor, num_classes: int) -> None:
        if not target.is_floating_point():
            raise TaskMismatch("regression needs float targets, the data's are integers (task.kind classification?)")
        if shape_of(_fit(output, target)) != shape_of(target):
            raise TaskMismatch(
                f"output {shape_of(output)} does not fit regression targets {shape_of(target)} "
                "(expected the target's shape, or one trailing 1 more)"
            )
