"""A task is a loss plus its metrics; local training, evaluation and the fused executor all go through it.

Evaluation adds three numbers per batch on the device, ``(loss sum, correct, units)``, where a unit is what the
loss averages over (a sample; a token for language modelling), so shards of a test set add up exactly and are
read back once. :class:`EvalResult` turns the sums into the task's metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor


class TaskMismatch(ValueError):
    """The model's output does not fit the task; the message says how (one line)."""


@dataclass(frozen=True)
class EvalResult:
    """``accuracy`` is NaN for a task without one (regression, a loss of your own); ``loss`` is the mean
    over ``samples`` units; ``metric``/``value`` are the task's headline (accuracy, mse, perplexity, loss)."""

    accuracy: float
    loss: float
    samples: int
    metric: str = "accuracy"

    @property
    def value(self) -> float:
        if self.metric == "accuracy":
            return self.accuracy
        if self.metric == "perplexity":
            return math.exp(min(self.loss, 700.0))
        return self.loss

    def metrics(self) -> dict[str, float]:
        named = {"loss": self.loss, self.metric: self.value}
        if not math.isnan(self.accuracy):
            named["accuracy"] = self.accuracy
        return named


class Task:
    """Subclasses set ``name`` and ``metric`` and define :meth:`per_unit` (or override :meth:`loss`)."""

    name = "task"
    metric = "loss"  # the headline of :class:`EvalResult`
    has_accuracy = False

    def per_sample(self, output: Tensor, target: Tensor) -> Tensor:
        """The loss of each sample, shape ``(batch,)``: its mean over the sample's :meth:`units`."""
        raise NotImplementedError

    def units(self, target: Tensor) -> Tensor:
        """What each sample's loss averages over, shape ``(batch,)``: one each, unless a task says otherwise (a
        language model counts a sequence's real tokens)."""
        return torch.ones(target.shape[0], device=target.device)

    def loss(self, output: Tensor, target: Tensor) -> Tensor:
        """The loss of a batch, which local training differentiates: the per-sample losses weighted by their
        units (a plain mean when every sample is one unit). The fused executor weights each client's samples
        the same way, so a task has one definition of its loss, whichever executor trains it."""
        losses = self.per_sample(output, target)
        if type(self).units is Task.units:
            return losses.mean()
        units = self.units(target).to(losses.dtype)
        return (losses * units).sum() / units.sum()

    def sums(self, output: Tensor, target: Tensor) -> Tensor:
        """``(loss sum, correct, units)`` of a batch as a float64 tensor on the output's device."""
        losses = self.per_sample(output, target).double()
        units = self.units(target).double()
        correct = self.correct(output, target) if self.has_accuracy else losses.new_zeros(())
        return torch.stack([(losses * units).sum(), correct.double(), units.sum()])

    def correct(self, output: Tensor, target: Tensor) -> Tensor:
        raise NotImplementedError

    def check(self, output: Tensor, target: Tensor, num_classes: int) -> None:
        """Raise :class:`TaskMismatch` when ``output`` cannot be scored against ``target``."""
        try:
            value = self.loss(output, target)
        except Exception as exc:  # the user's loss: whatever it raises is the mismatch
            raise TaskMismatch(f"{type(exc).__name__}: {exc}") from None
        if not isinstance(value, Tensor) or value.numel() != 1:
            shape = list(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise TaskMismatch(f"the loss must be one number, got {shape}")

    def check_targets(self, target: Tensor, num_classes: int) -> None:
        """Raise :class:`TaskMismatch` naming the first target the loss cannot take (a class label past
        ``num_classes``); a task whose targets have no range (regression, a loss of your own) takes any."""

    def result(self, sums: Tensor) -> EvalResult:
        """The metrics of summed ``(loss sum, correct, units)``: one host read."""
        loss_sum, correct, units = sums.tolist()
        n = max(int(units), 1)
        accuracy = int(correct) / n if self.has_accuracy else float("nan")
        return EvalResult(accuracy=accuracy, loss=loss_sum / n, samples=int(units), metric=self.metric)


def shape_of(t: Tensor) -> list[int]:
    return list(t.shape)


def check_ids(target: Tensor, num_classes: int, what: str, ignore: int | None = None) -> None:
    """Raise :class:`TaskMismatch` naming the first of ``target``'s ``what`` (``label``, ``token id``) outside
    ``0..num_classes - 1`` (other than ``ignore``): cross-entropy would fail on it partway through a run."""
    bad = (target < 0) | (target >= num_classes)
    if ignore is not None:
        bad &= target != ignore
    if bool(bad.any()):
        at = bad.nonzero()[0]
        value, sample = int(target[tuple(at.tolist())]), int(at[0])
        but = f" or ignore_index={ignore}" if ignore is not None else ""
        raise TaskMismatch(
            f"{what} {value} of sample {sample} is outside 0..{num_classes - 1}{but} (num_classes={num_classes})"
        )
