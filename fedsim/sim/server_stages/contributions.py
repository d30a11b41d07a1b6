"""Each client's part of every summed segment, kept where a server stage takes clients out of the round.

The round's sums are linear in the clients: ``sums[name] = sum_i coefficient_i[name] * row_i[name]``, beside
the weight ``sum_i w_i``, the count and DP's clip bits. A client's update row (``delta``) is gathered for a
stage that reads rows (:class:`~fedsim.robust.gather.GatheredRows`, with its coefficient); a stage that
declares ``removes_clients`` also needs the client's part of every other segment (FedNova's ``w_i tau_i``,
SCAFFOLD's ``c_i+ - c_i``, ``w_i``, 1, its clip bit), which :class:`Contributions` keeps, one row a client in
the same client order, all-reduced with the update rows. Taking client ``i`` out then subtracts its parts from
every segment: what is left is the sum over the others, the sum of a round it never reported in, up to float32
rounding (the sum added it in another order).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor

from fedsim.robust.gather import GatheredRows


class Contributions:
    """Clients ``cids``' parts of the segments of ``layout`` (name -> size; every summed segment but ``delta``),
    ``rows`` (n, total size), in memory up to ``budget`` bytes and memory-mapped at ``spill`` past it."""

    def __init__(
        self, layout: Mapping[str, int], cids: Sequence[int], budget: int, spill: Path, device: torch.device
    ) -> None:
        self.slices: dict[str, tuple[int, int]] = {}
        offset = 0
        for name, size in layout.items():
            self.slices[name] = (offset, offset + size)
            offset += size
        self.rows = GatheredRows(cids, offset, budget, spill, device)

    def keep_(self, cids: Sequence[int], parts: Mapping[str, Tensor]) -> None:
        """Keep K clients' ``parts`` ((K, size) each: what each added to that segment); a segment the round sums
        that the parts do not name is an error, never a silent zero."""
        missing = [name for name in self.slices if name not in parts]
        if missing:
            raise KeyError(f"no client part kept for the summed segment(s) {', '.join(missing)}")
        k = len(cids)
        block = torch.cat([parts[name].reshape(k, -1).to(self.rows.device, torch.float32) for name in self.slices], 1)
        self.rows.put_(cids, block, torch.ones(k, device=self.rows.device))

    def all_reduce_(self, all_reduce: Callable[[Tensor], int]) -> int:
        return self.rows.all_reduce_(all_reduce)

    def take_(self, cid: int, sums: Mapping[str, Tensor]) -> None:
        """Subtract client ``cid``'s parts from ``sums`` and forget them (taking it twice takes nothing more)."""
        i = self.rows.place[cid]
        row = self.rows.rows[i]
        for name, (lo, hi) in self.slices.items():
            sums[name].sub_(row[lo:hi].to(sums[name].device))
        row.zero_()
