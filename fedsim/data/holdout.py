"""Each client's own held-out data, for federated (personalised) evaluation.

A client's samples are shuffled once by its own RNG, seeded from (seed, client), and the last ``fraction`` of
them (at least one when it has two or more) are held out: local training never sees them, federated evaluation
scores the global model (and a personalised algorithm's personal model) on them.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedsim.data.base import ClientData, FederatedDataset


class LocalHoldout:
    """``dataset`` with ``fraction`` of every client's samples held out (:meth:`heldout`)."""

    def __init__(self, dataset: FederatedDataset, fraction: float, seed: int) -> None:
        self.inner = dataset
        self.fraction, self.seed = fraction, seed
        self.num_clients = dataset.num_clients
        self.num_classes = dataset.num_classes
        self.input_shape = dataset.input_shape
        self.test = dataset.test
        self._orders: dict[int, tuple[Tensor, Tensor]] = {}

    def held(self, n: int) -> int:
        """How many of a client's ``n`` samples are held out."""
        return 0 if n < 2 else min(n - 1, max(1, int(n * self.fraction)))

    def _order(self, cid: int) -> tuple[Tensor, Tensor]:
        if cid not in self._orders:
            n = self.inner.n_samples(cid)
            perm = torch.from_numpy(np.random.default_rng([self.seed, cid]).permutation(n))
            cut = n - self.held(n)
            self._orders[cid] = (perm[:cut].sort().values, perm[cut:].sort().values)
        return self._orders[cid]

    def _rows(self, cid: int, which: int) -> ClientData:
        data = self.inner.client(cid)
        return data.take(self._order(cid)[which].to(data.x.device))

    def client(self, cid: int) -> ClientData:
        return self._rows(cid, 0)

    def heldout(self, cid: int) -> ClientData:
        return self._rows(cid, 1)

    def n_samples(self, cid: int) -> int:
        n = self.inner.n_samples(cid)
        return n - self.held(n)
