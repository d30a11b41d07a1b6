"""Next-token language modelling: cross-entropy per token, reported as perplexity (exp of the mean loss).

Logits ``(batch, vocab)`` against one next token per sample (LEAF's Shakespeare), or ``(batch, length, vocab)``
against ``(batch, length)`` targets already shifted by one; targets equal to ``ignore_index`` are padding and
count for nothing. A unit is a token, so perplexity over shards and batches is exact.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fedsim.tasks.base import Task, TaskMismatch, check_ids, shape_of


class LanguageModel(Task):
    name = "language_model"
    metric = "perplexity"
    has_accuracy = True

    def __init__(self, ignore_index: int = -100) -> None:
        self.ignore_index = ignore_index

    def _token_losses(self, output: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(
            output.reshape(-1, output.shape[-1]), target.reshape(-1), ignore_index=self.ignore_index, reduction="none"
        ).view_as(target)

    def per_sample(self, output: Tensor, target: Tensor) -> Tensor:
        """Each sequence's mean loss over its real tokens (0 for a sequence of padding only)."""
        losses = self._token_losses(output, target)
        if losses.dim() == 1:
            return losses
        return losses.sum(1) / self.units(target).to(losses.dtype).clamp_min(1.0)

    def units(self, target: Tensor) -> Tensor:
        """Each sample's real tokens: a batch's loss is the mean over tokens, not over sequences."""
        real = (target != self.ignore_index).float()
        return real.flatten(1).sum(1) if real.dim() > 1 else real

    def sums(self, output: Tensor, target: Tensor) -> Tensor:
        losses = self._token_losses(output, target).double()
        real = target != self.ignore_index
        correct = ((output.argmax(-1) == target) & real).sum().double()
        return torch.stack([losses.sum(), correct, real.sum().double()])

    def check_targets(self, target: Tensor, num_classes: int) -> None:
        if not target.is_floating_point():  # float targets: check() says so, with the model's output
            check_ids(target, num_classes, "token id", self.ignore_index)

    def check(self, output: Tensor, target: Tensor, num_classes: int) -> None:
        ok = output.dim() == target.dim() + 1 and output.shape[:-1] == target.shape and output.shape[-1] == num_classes
        if not ok:
            raise TaskMismatch(
                f"output {shape_of(output)} does not fit next-token targets {shape_of(target)} with a vocabulary of "
                f"{num_classes} (expected {[*shape_of(target), num_classes]})"
            )
        if target.is_floating_point():
            raise TaskMismatch("language modelling needs integer token targets, the data's are floats")
