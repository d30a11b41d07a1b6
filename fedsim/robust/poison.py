"""Data poisoning: a malicious client trains on altered data. ``label_flip`` maps label ``y`` to
``classes - 1 - y``; ``backdoor`` (Bagdasaryan et al. 2020's pixel pattern) stamps a square of the inputs'
largest value into the bottom-right corner of a share of the client's samples and gives them the target label.
The backdoor's success is the share of triggered test inputs (of other true labels) classified as the target."""

from __future__ import annotations

import math

import numpy as np
import torch

from fedsim.config.attack import AttackConfig
from fedsim.data.base import ClientData, FederatedDataset

_POISONED = 0x5053  # which of a client's samples carry the trigger: a stream beside the seed and the client


def stamp(x: torch.Tensor, side: int) -> torch.Tensor:
    """``x`` (n, ..., H, W) with its bottom-right ``side`` x ``side`` square set to the largest value of ``x``."""
    out = x.clone()
    out[..., -side:, -side:] = x.max() if x.numel() else 0.0
    return out


class PoisonedData:
    """``dataset`` whose ``malicious`` clients' data are poisoned as ``cfg`` says; the rest as they were."""

    def __init__(self, dataset: FederatedDataset, malicious: frozenset[int], cfg: AttackConfig, seed: int) -> None:
        if cfg.kind == "backdoor" and len(dataset.input_shape) < 2:
            raise ValueError(f"attack.kind=backdoor stamps a pixel pattern: inputs of shape {dataset.input_shape}")
        self.inner, self.malicious, self.cfg, self.seed = dataset, malicious, cfg, seed
        self.num_clients, self.num_classes = dataset.num_clients, dataset.num_classes
        self.input_shape, self.test = dataset.input_shape, dataset.test

    def n_samples(self, cid: int) -> int:
        return self.inner.n_samples(cid)

    def client(self, cid: int) -> ClientData:
        data = self.inner.client(cid)
        if cid not in self.malicious:
            return data
        if self.cfg.kind == "label_flip":
            return ClientData(data.x, self.num_classes - 1 - data.y)
        n = data.n_samples
        poisoned = math.ceil(self.cfg.poison_fraction * n)
        chosen = np.random.default_rng([self.seed, _POISONED, cid]).permutation(n)[:poisoned]
        index = torch.from_numpy(np.sort(chosen)).to(data.x.device)
        x, y = data.x.clone(), data.y.clone()
        x[index] = stamp(data.x[index], self.cfg.trigger)
        y[index] = self.cfg.target
        return ClientData(x, y)

    def triggered_test(self, test: ClientData) -> ClientData:
        """The test inputs whose label is not the target, stamped and labelled the target: a model's accuracy on
        them is the backdoor's success rate."""
        keep = test.y != self.cfg.target
        return ClientData(stamp(test.x[keep], self.cfg.trigger), torch.full_like(test.y[keep], self.cfg.target))
