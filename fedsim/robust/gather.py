"""The round's updates gathered, one row per client, for the aggregation rules that are not a sum.

Every rank writes its clients' rows at their places in one (n, numel) buffer, zeros elsewhere, and one
all-reduce (a sum) leaves every rank with every row: one collective a round, as the summed path has, and the
rows in client order whichever rank trained whom, so every rank computes the same aggregate. The buffer lives
on the rank's device up to ``budget`` bytes; past that it is a memory-mapped file on the host (the page cache
holds what it can, the disk the rest), and the rules read it ``block`` columns at a time, so what they hold
in memory is at most ``budget`` bytes too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor

FLOAT_BYTES = 4


class Gatherer(Protocol):
    """What keeps each client's update row besides the sum (a gathering rule, a server stage that reads rows)."""

    def gather_(self, cids: Sequence[int], update: Tensor, weights: Tensor) -> None: ...


class GatheredRows:
    """``rows`` (n, numel): the updates of the clients in ``cids`` (sorted), in memory or memory-mapped."""

    def __init__(self, cids: Sequence[int], numel: int, budget: int, spill: Path, device: torch.device) -> None:
        self.cids = sorted(cids)
        self.place = {cid: i for i, cid in enumerate(self.cids)}
        self.device = device
        n = len(self.cids)
        self.weights = torch.zeros(n, device=device)
        nbytes = n * numel * FLOAT_BYTES
        self.spilled = nbytes > budget
        if self.spilled:
            spill.parent.mkdir(parents=True, exist_ok=True)
            with spill.open("wb") as f:  # a sparse file of zeros: nothing written until rows arrive
                f.truncate(nbytes)
            self.rows = torch.from_file(str(spill), shared=True, size=n * numel, dtype=torch.float32).view(n, numel)
            os.unlink(spill)  # the mapping keeps it while the round needs it; nothing is left behind
        else:
            self.rows = torch.zeros(n, numel, device=device)
        self.block = max(1, budget // max(n * FLOAT_BYTES, 1))  # columns a rule holds at once

    @property
    def n(self) -> int:
        return len(self.cids)

    def put_(self, cids: Sequence[int], rows: Tensor, weights: Tensor) -> None:
        """Write K clients' rows (K, numel) and weights (K,) at their places."""
        for k, cid in enumerate(cids):
            i = self.place[cid]
            self.rows[i].copy_(rows[k])
            self.weights[i] = weights[k]

    def all_reduce_(self, all_reduce: Callable[[Tensor], int]) -> int:
        """Every rank's rows on every rank (``all_reduce`` sums a tensor over the ranks in place); returns the
        bytes moved. One collective for rows in memory; spilled rows go block by block."""
        moved = all_reduce(self.weights)
        if self.spilled:  # block by block: the mapped file is never read into memory whole
            for lo, hi, block in self.blocks():
                moved += all_reduce(block)
                self.rows[:, lo:hi].copy_(block)
            return moved
        return moved + all_reduce(self.rows)

    def blocks(self) -> Iterator[tuple[int, int, Tensor]]:
        """``(lo, hi, rows[:, lo:hi])`` over the columns, each block on the device (a copy when spilled)."""
        numel = self.rows.shape[1]
        step = numel if not self.spilled else self.block
        for lo in range(0, numel, step):
            hi = min(lo + step, numel)
            block = self.rows[:, lo:hi]
            yield lo, hi, block.to(self.device, copy=True) if self.spilled else block

    def gram(self) -> Tensor:
        """(n, n) inner products of the rows, in float64, accumulated block by block."""
        gram = torch.zeros(self.n, self.n, dtype=torch.float64, device=self.device)
        for _, _, block in self.blocks():
            b = block.double()
            gram += b @ b.t()
        return gram

    def squared_distances(self) -> Tensor:
        """(n, n) squared L2 distances between the rows."""
        gram = self.gram()
        gram = (gram + gram.t()) / 2  # a matrix product need not come out exactly symmetric: ties must stay ties
        norms = gram.diagonal()
        return (norms[:, None] + norms[None, :] - 2 * gram).clamp_min_(0).fill_diagonal_(0)
