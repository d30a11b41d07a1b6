"""One flat buffer holding every quantity an algorithm sums, so a round needs one collective."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor


class SumBuffer:
    """Named, contiguous segments of ``flat``; ``segments[name]`` is a view.

    The executors add every client's rows in place (:meth:`add_rows_`), the engine all-reduces ``flat`` once
    per round, and the segment views then read the global sums without copying.
    """

    def __init__(self, sizes: Mapping[str, int], device: torch.device | str = "cpu") -> None:
        self.flat = torch.zeros(sum(sizes.values()), device=device)
        self.segments: dict[str, Tensor] = {}
        offset = 0
        for name, size in sizes.items():
            self.segments[name] = self.flat[offset : offset + size]
            offset += size

    def zero_(self) -> None:
        self.flat.zero_()

    def add_rows_(self, rows: Mapping[str, Tensor], coefficients: Mapping[str, Tensor]) -> None:
        """``segment += coefficients[name] @ rows[name]`` for K rows, in place: one fused multiply-add for one
        row, one matrix-vector product for several; nothing is allocated and nothing is read on the host."""
        for name, block in rows.items():
            segment, coefficient = self.segments[name], coefficients[name]
            if block.shape[0] == 1:
                segment.addcmul_(block[0], coefficient)
            else:
                segment.addmv_(block.t(), coefficient)

    @property
    def nbytes(self) -> int:
        return self.flat.numel() * self.flat.element_size()
