"""A cross-device population in the shape of StackOverflow next-word prediction, generated client by client.

TFF's StackOverflow split has 342,477 training clients and 135,818,730 sentences (397 a client on average, with
a heavy tail); the "Adaptive Federated Optimization" setting (Reddi et al., ICLR 2021) trains 50 of them a
round on sequences of 20 tokens. This generator keeps that shape without the data:

- client ``k`` has ``min(max_samples, ceil(LogNormal(mu, sigma)))`` sentences, ``mu`` set so that the uncapped
  mean is ``mean_samples``: a heavy tail (``sigma`` 1.5: median about a third of the mean);
- client ``k`` writes about one of ``topics`` topics; a topic is a Zipf distribution over the vocabulary in an
  order of its own, and each token of a sentence is drawn from the client's topic, or with probability
  ``noise / (1 + noise)`` from the Zipf distribution in the vocabulary's own order. A model that reads the
  context can tell the topic, so perplexity falls from about ``vocab`` towards the topic's as it learns;
- every client is drawn from a generator seeded by (seed, client) when it trains, so neither time nor memory
  grows with the population; the test split is ``test_samples`` sentences of clients beyond the population.

Inputs are a sentence's first ``length`` tokens (as floats, fedsim's client data are float tensors) and targets
the ``length`` tokens after each (int64), for ``task.kind: language_model`` and ``model.kind: next_word_lstm``.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fedsim.config import CrossDeviceTextData
from fedsim.data.base import ClientData

SIGMA = 1.5


class CrossDeviceText:
    """The population of :mod:`fedsim.data.cross_device`; ``client(cid)`` generates that client's sentences."""

    def __init__(self, cfg: CrossDeviceTextData, seed: int) -> None:
        self.cfg = cfg
        self.seed = seed
        self.num_clients = cfg.clients
        self.num_classes = cfg.vocab
        self.input_shape: tuple[int, ...] = (cfg.length,)
        self._mu = math.log(cfg.mean_samples) - SIGMA**2 / 2
        rng = np.random.default_rng([seed, 0x5EED])
        self._order = np.stack([rng.permutation(cfg.vocab) for _ in range(cfg.topics)])  # a topic's words by rank
        zipf = 1.0 / np.arange(1, cfg.vocab + 1)
        self._zipf_cdf = np.cumsum(zipf / zipf.sum())
        x, y = [], []
        cid, held = cfg.clients, 0
        while held < cfg.test_samples:  # clients beyond the population: unseen in training
            data = self.client(cid)
            x.append(data.x)
            y.append(data.y)
            held, cid = held + data.n_samples, cid + 1
        self.test = ClientData(torch.cat(x)[: cfg.test_samples], torch.cat(y)[: cfg.test_samples])

    def _rng(self, cid: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, 0xC11E, cid])

    def _size(self, rng: np.random.Generator) -> int:
        return max(1, min(self.cfg.max_samples, math.ceil(rng.lognormal(self._mu, SIGMA))))

    def n_samples(self, cid: int) -> int:
        return self._size(self._rng(cid))

    def client(self, cid: int) -> ClientData:
        rng = self._rng(cid)
        n, cfg = self._size(rng), self.cfg
        topic = int(rng.integers(cfg.topics))
        shape = (n, cfg.length + 1)
        ranks = np.minimum(np.searchsorted(self._zipf_cdf, rng.random(shape)), cfg.vocab - 1)
        off_topic = rng.random(shape) < cfg.noise / (1.0 + cfg.noise)
        tokens = np.where(off_topic, ranks, self._order[topic][ranks])
        x = torch.from_numpy(tokens[:, :-1].astype(np.float32))
        return ClientData(x, torch.from_numpy(tokens[:, 1:].copy()))
