"""Classification: cross-entropy loss, top-1 accuracy; evaluation of a flat model on held-out data."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from fedsim.data.base import ClientData
from fedsim.models.replica import Replica


@dataclass(frozen=True)
class EvalResult:
    accuracy: float
    loss: float
    samples: int


@torch.no_grad()
def evaluate(replica: Replica, state: Tensor, test: ClientData, batch_size: int) -> EvalResult:
    """Top-1 accuracy and mean cross-entropy of ``state`` on ``test``, loaded into ``replica`` in eval mode."""
    replica.load_(state)
    module = replica.module
    module.eval()
    correct = 0
    loss_sum = 0.0
    for lo in range(0, test.n_samples, batch_size):
        xb, yb = test.x[lo : lo + batch_size], test.y[lo : lo + batch_size]
        logits = module(xb)
        loss_sum += float(F.cross_entropy(logits, yb, reduction="sum"))
        correct += int((logits.argmax(1) == yb).sum())
    module.train()
    n = max(test.n_samples, 1)
    return EvalResult(accuracy=correct / n, loss=loss_sum / n, samples=test.n_samples)
