"""Top-k sparsification of a client's uplink update with error feedback (Stich et al., 2018; Karimireddy et al.).

The client adds the residual it kept from earlier rounds to this round's update, sends the k entries of
largest magnitude (int32 index + float32 value each) and keeps the rest as its new residual, so nothing is
dropped for good: over rounds, what was sent plus the final residual equals what was computed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

BYTES_PER_ENTRY = 8  # int32 index + float32 value


@dataclass(frozen=True)
class Sparse:
    indices: Tensor  # (k,) int64 into the flattened update
    values: Tensor  # (k,) float32
    numel: int

    @property
    def nbytes(self) -> int:
        return BYTES_PER_ENTRY * int(self.indices.numel())

    def dense(self) -> Tensor:
        out = torch.zeros(self.numel, dtype=self.values.dtype, device=self.values.device)
        out[self.indices] = self.values
        return out


class TopK:
    """Keep ``fraction`` of the entries (at least one); ``fraction=1`` sends everything."""

    def __init__(self, fraction: float) -> None:
        if not 0 < fraction <= 1:
            raise ValueError(f"top-k fraction must be in (0, 1], got {fraction}")
        self.fraction = fraction

    def k(self, numel: int) -> int:
        return max(1, math.ceil(self.fraction * numel))

    def compress(self, update: Tensor, residual: Tensor | None = None) -> tuple[Sparse, Tensor]:
        """``(sparse message, new residual)`` for a flat ``update`` and the residual kept so far."""
        corrected = update.detach().flatten().to(torch.float32, copy=True)  # never zero the caller's tensor
        if residual is not None:
            corrected = corrected + residual
        k = self.k(corrected.numel())
        indices = corrected.abs().topk(k, sorted=False).indices
        values = corrected[indices].clone()
        corrected[indices] = 0.0
        return Sparse(indices, values, corrected.numel()), corrected
