"""K clients' local batches laid out step by step, for the fused executor: each client's draws exactly as local
SGD draws them (:func:`fedsim.algorithms.local_sgd.batch_schedule`), padded to one width and masked."""

from __future__ import annotations

import torch

from fedsim.algorithms.local_sgd import batch_schedule, num_steps
from fedsim.config import AlgorithmConfig


class BatchPlan:
    """Every step's batch of K clients as indices into their concatenated data, drawn as local SGD draws them.

    ``index`` (S, K, B) points into the concatenation of the K clients' samples plus one zero row that pads
    short batches; ``mask`` (S, K, B) is 1 on real samples; ``active`` (S, K) is 1 while a client still has
    steps to take. ``steps`` and ``samples`` per client are host integers.
    """

    def __init__(self, sizes: list[int], generators: list[torch.Generator], opt: AlgorithmConfig) -> None:
        self.steps = [num_steps(n, opt) for n in sizes]
        width = max(min(opt.batch_size, n) for n in sizes)
        pad = sum(sizes)  # the zero row after every client's samples
        total = max(self.steps)
        # one write per client and epoch into a host tensor (the mask follows from the padding): six writes per
        # client and epoch cost ~20 us each
        index = torch.full((total, len(sizes), width), pad, dtype=torch.int64, device="cpu")
        self.samples = [0] * len(sizes)
        offset = 0
        for k, (n, g) in enumerate(zip(sizes, generators, strict=True)):
            bs = min(opt.batch_size, n)
            cells = torch.full((self.steps[k] * bs,), pad, dtype=torch.int64, device="cpu")
            at = 0  # step s of the client takes cells[s*bs : s*bs+bs]; an epoch's last batch may be short
            for perm, epoch_steps in batch_schedule(n, opt, g):  # local SGD's batches, the same generator
                real = min(epoch_steps * bs, n)
                torch.add(perm[:real], offset, out=cells[at : at + real])
                at += epoch_steps * bs
                self.samples[k] += real
            index[: self.steps[k], k, :bs] = cells.view(self.steps[k], bs)
            offset += n
        self.index = index
        self.mask = self.index.ne(pad).float()
        steps = torch.tensor(self.steps, device="cpu")
        self.active = (torch.arange(total, device="cpu")[:, None] < steps[None, :]).float()
