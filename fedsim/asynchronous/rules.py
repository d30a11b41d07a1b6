"""How an asynchronous server applies updates that arrive stale.

An update is stale by ``s`` when the server stepped ``s`` times between the model its client started from and
its arrival. The staleness functions are Xie et al.'s (FedAsync, arXiv 1903.03934, section 5.2):

- ``constant``: 1;
- ``polynomial``: ``(1 + s) ** -a`` (``a = 0.5`` is FedBuff's ``1 / sqrt(1 + s)``);
- ``hinge``: 1 while ``s <= b``, then ``1 / (a * (s - b) + 1)``.

**FedBuff** (Nguyen et al., AISTATS 2022, Algorithm 1): the server buffers ``K`` client deltas ``Delta_k``
(local model minus the model the client started from), each scaled by its staleness weight, and steps once
with their mean, ``(1 / K) * sum_k w(s_k) * Delta_k``, through the server optimiser (here: the algorithm's
own server update, fed the buffer as a round's sums, each client's aggregation weight included).

**FedAsync** (Xie et al., Algorithm 1): every arriving local model ``x_new`` is mixed in at once,
``x <- (1 - alpha_s) * x + alpha_s * x_new`` with ``alpha_s = alpha * w(s)``.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

Staleness = Literal["constant", "polynomial", "hinge"]


def staleness_weight(kind: Staleness, s: int, a: float = 0.5, b: float = 4.0) -> float:
    if s < 0:
        raise ValueError(f"staleness must be >= 0, got {s}")
    if kind == "constant":
        return 1.0
    if kind == "polynomial":
        return float((1.0 + s) ** -a)
    return 1.0 if s <= b else 1.0 / (a * (s - b) + 1.0)


class Buffer:
    """FedBuff's buffer: the staleness-weighted sum of the deltas so far, the sum of their aggregation weights,
    and how many arrived. :meth:`sums` is what the algorithm's server update reads for a round. With ``rows``
    (K, the buffer's size) it also keeps each arrival's staleness-weighted delta and its aggregation weight, in
    arrival order, for an aggregation rule that reads every update (a zero row where another rank holds it)."""

    def __init__(self, numel: int, device: torch.device, rows: int = 0) -> None:
        self.delta = torch.zeros(numel, device=device)
        self.weight = 0.0
        self.count = 0
        self.rows = torch.zeros(rows, numel, device=device) if rows else None
        self.weights = torch.zeros(rows, device=device)

    def add_(self, delta: Tensor | None, weight: float, staleness: float) -> None:
        """One arrival: ``delta`` (local minus start; None where another rank holds it), its aggregation
        ``weight``, its staleness weight."""
        if delta is not None:
            self.delta.add_(delta, alpha=weight * staleness)
            if self.rows is not None:  # the owner's row and weight; the ranks' rows are summed at the step
                self.rows[self.count].copy_(delta).mul_(staleness)
                self.weights[self.count] = weight
        self.weight += weight
        self.count += 1

    def sums(self) -> dict[str, Tensor]:
        return {"delta": self.delta, "weight": torch.tensor(self.weight, dtype=torch.float64)}

    def clear_(self) -> None:
        self.delta.zero_()
        self.weight, self.count = 0.0, 0
        if self.rows is not None:
            self.rows.zero_()
            self.weights.zero_()


def fedasync_mix_(global_state: Tensor, local: Tensor, alpha: float, staleness: float) -> None:
    """``global <- (1 - alpha * w) * global + alpha * w * local``, in place."""
    global_state.lerp_(local, alpha * staleness)
