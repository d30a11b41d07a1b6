"""Gaussian features with uniform random labels, for throughput and memory benchmarks."""

from __future__ import annotations

import torch

from fedsim.config import RandomData
from fedsim.data.base import ClientData


class RandomDataset:
    """``samples_per_client`` samples per client; eager (one tensor, clients are views) or lazy.

    The lazy form regenerates client ``cid`` from a generator seeded by (seed, cid) on every call, so it is
    the same each round and memory does not grow with the population.
    """

    def __init__(self, cfg: RandomData, seed: int) -> None:
        self.cfg = cfg
        self.seed = seed
        self.num_clients = cfg.clients
        self.num_classes = cfg.classes
        self.input_shape: tuple[int, ...] = (cfg.features,)
        gen = torch.Generator().manual_seed(seed)
        self.test = ClientData(
            torch.randn(cfg.test_samples, cfg.features, generator=gen, device="cpu"),
            torch.randint(0, cfg.classes, (cfg.test_samples,), generator=gen, device="cpu"),
        )
        self._x: torch.Tensor | None = None
        self._y: torch.Tensor | None = None
        if not cfg.lazy:
            n = cfg.clients * cfg.samples_per_client
            self._x = torch.randn(n, cfg.features, generator=gen, device="cpu")
            self._y = torch.randint(0, cfg.classes, (n,), generator=gen, device="cpu")

    def client(self, cid: int) -> ClientData:
        k = self.cfg.samples_per_client
        if self._x is not None and self._y is not None:
            return ClientData(self._x[cid * k : (cid + 1) * k], self._y[cid * k : (cid + 1) * k])
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + cid + 1)
        return ClientData(
            torch.randn(k, self.cfg.features, generator=gen, device="cpu"),  # data live on the host
            torch.randint(0, self.cfg.classes, (k,), generator=gen, device="cpu"),
        )

    def n_samples(self, cid: int) -> int:
        return self.cfg.samples_per_client
