"""Evaluation of a flat model on held-out data under a task, summed on the device and read back once."""

from __future__ import annotations

import torch
from torch import Tensor

from fedsim.data.base import ClientData
from fedsim.models.replica import Replica
from fedsim.tasks.base import EvalResult, Task
from fedsim.tasks.classification import Classification

_CLASSIFICATION = Classification()


def evaluate(
    replica: Replica, state: Tensor, test: ClientData, batch_size: int, task: Task = _CLASSIFICATION
) -> EvalResult:
    """The task's metrics of ``state`` on ``test``, loaded into ``replica`` in eval mode."""
    return task.result(evaluation_sums(replica, state, test, batch_size, task))


@torch.no_grad()
def evaluation_sums(
    replica: Replica, state: Tensor, test: ClientData, batch_size: int, task: Task = _CLASSIFICATION
) -> Tensor:
    """``(loss sum, correct, units)`` of ``state`` on ``test`` as one float64 tensor on the state's device, not
    read back: ranks evaluating shards of a test set add these and read the sum once."""
    replica.load_(state)
    return loaded_sums(replica, test, batch_size, task)


@torch.no_grad()
def loaded_sums(replica: Replica, test: ClientData, batch_size: int, task: Task = _CLASSIFICATION) -> Tensor:
    """:func:`evaluation_sums` of the model already loaded in ``replica`` (score many sets, load once)."""
    module = replica.module
    module.eval()
    sums = torch.zeros(3, dtype=torch.float64, device=replica.flat.device)
    for lo in range(0, test.n_samples, batch_size):
        xb, yb = test.x[lo : lo + batch_size], test.y[lo : lo + batch_size]
        sums += task.sums(module(xb), yb)
    module.train()
    return sums
