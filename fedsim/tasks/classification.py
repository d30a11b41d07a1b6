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


def evaluate(replica: Replica, state: Tensor, test: ClientData, batch_size: int) -> EvalResult:
    """Top-1 accuracy and mean cross-entropy of ``state`` on ``test``, loaded into ``replica`` in eval mode."""
    return eval_result(evaluation_sums(replica, state, test, batch_size))


def eval_result(sums: Tensor) -> EvalResult:
    """The :class:`EvalResult` of :func:`evaluation_sums` (summed over shards, if any): one host read."""
    correct, loss_sum, samples = sums.tolist()
    n = max(int(samples), 1)
    return EvalResult(accuracy=int(correct) / n, loss=loss_sum / n, samples=int(samples))


@torch.no_grad()
def evaluation_sums(replica: Replica, state: Tensor, test: ClientData, batch_size: int) -> Tensor:
    """``(correct, summed cross-entropy, samples)`` of ``state`` on ``test`` as one float64 tensor on the
    state's device, not read back: ranks evaluating shards of a test set add these and read the sum once."""
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
    samples = torch.full((), float(test.n_samples), dtype=torch.float64, device=state.device)
    return torch.stack([correct.double(), loss_sum, samples])
