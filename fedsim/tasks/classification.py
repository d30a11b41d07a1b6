"""Classification: cross-entropy over ``(batch, classes)`` logits, top-1 accuracy."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from fedsim.tasks.base import Task, TaskMismatch, check_ids, shape_of


class Classification(Task):
    name = "classification"
    metric = "accuracy"
    has_accuracy = True

    def per_sample(self, output: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(output, target, reduction="none")

    def loss(self, output: Tensor, target: Tensor) -> Tensor:
        return F.cross_entropy(output, target)

    def correct(self, output: Tensor, target: Tensor) -> Tensor:
        return (output.argmax(1) == target).sum()

    def check(self, output: Tensor, target: Tensor, num_classes: int) -> None:
        expected = [target.shape[0], num_classes]
        if shape_of(output) != expected:
            raise TaskMismatch(
                f"output {shape_of(output)} for {target.shape[0]} inputs does not fit classification with "
                f"{num_classes} classes (expected {expected})"
            )
        if target.is_floating_point():
            raise TaskMismatch("classification needs integer labels, the data's are floats (task.kind regression?)")

    def check_targets(self, target: Tensor, num_classes: int) -> None:
        if not target.is_floating_point():  # float labels: check() says so, with the model's output
            check_ids(target, num_classes, "label")
