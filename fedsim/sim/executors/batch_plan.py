"""K clients' local batches laid out step by step, for the fused executor: each client's draws exactly as local
SGD draws them (:func:`fedsim.algorithms.local_sgd.batch_schedule`), padded to one width and masked."""

from __future__ import annotations

import itertools
from collections import defaultdict

import torch

from fedsim.algorithms.local_sgd import batch_schedule, num_steps
from fedsim.config import AlgorithmConfig


class BatchPlan:
    """Every step's batch of K clients as indices into their concatenated data, drawn as local SGD draws them.

    ``index`` (S, K, B) points into the concatenation of the K clients' samples plus one zero row that pads
    short batches; ``mask`` (S, K, B) is 1 on real samples; ``active`` (S, K) is 1 while a client still has
    steps to take. ``steps`` and ``samples`` per client are host integers; ``padded`` says whether any cell
    points at the zero row.
    """

    def __init__(self, sizes: list[int], generators: list[torch.Generator], opt: AlgorithmConfig) -> None:
        self.steps = [num_steps(n, opt) for n in sizes]
        width = max(min(opt.batch_size, n) for n in sizes)
        pad = sum(sizes)  # the zero row after every client's samples
        total = max(self.steps)
        index = torch.full((total, len(sizes), width), pad, dtype=torch.int64, device="cpu")
        self.samples = [0] * len(sizes)
        offsets = [0, *itertools.accumulate(sizes[:-1])]
        alike: dict[int, list[int]] = defaultdict(list)  # clients of one size share one layout of their cells
        for k, n in enumerate(sizes):
            alike[n].append(k)
        for n, ks in alike.items():
            # every client's epochs from its own generator, in its order: the draws local SGD makes
            epochs = [list(batch_schedule(n, opt, generators[k])) for k in ks]
            steps, bs = self.steps[ks[0]], min(opt.batch_size, n)
            cells = torch.full((len(ks), steps * bs), pad, dtype=torch.int64, device="cpu")
            base = torch.tensor([offsets[k] for k in ks], dtype=torch.int64, device="cpu")[:, None]
            at = seen = 0  # step s of a client takes cells[s*bs : s*bs+bs]; an epoch's last batch may be short
            for e, (_, epoch_steps) in enumerate(epochs[0]):
                real = min(epoch_steps * bs, n)
                perms = torch.stack([client[e][0][:real] for client in epochs])
                torch.add(perms, base, out=cells[:, at : at + real])
                at += epoch_steps * bs
                seen += real
            for k in ks:
                self.samples[k] = seen
            index[:steps, ks, :bs] = cells.view(len(ks), steps, bs).transpose(0, 1)
        self.index = index
        self.mask = self.index.ne(pad).float()
        self.padded = sum(self.samples) < index.numel()  # a cell that holds no sample holds the zero row
        steps_t = torch.tensor(self.steps, device="cpu")
        self.active = (torch.arange(total, device="cpu")[:, None] < steps_t[None, :]).float()
