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
    # summed on the device (the loss in float64, as a host float would) and read back once
    correct = torch.zeros((), dtype=torch.int64, device=state.device)
    loss_sum = torch.zeros((), dtype=torch.float64, device=state.device)
    for lo in range(0, test.n_samples, batch_size):
        xb, yb = test.x[lo : lo + batch_size], test.y[lo : lo + batch_size]
        logits = module(xb)
        loss_sum += F.cross_entropy(logits, yb, reduction="sum").double()
        correct += (logits.argmax(1) == yb).sum()
    module.train()
    n = max(test.n_samples, 1)
    total_correct, total_loss = torch.stack([correct.double(), loss_sum]).tolist()
    return EvalResult(accuracy=int(total_correct) / n, loss=total_loss / n, samples=test.n_samples)
