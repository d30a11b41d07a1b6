"""Deterministic cohort sampling and per-client random streams."""

from __future__ import annotations

import numpy as np
import torch

_MIX = 0x9E3779B97F4A7C15  # golden-ratio constant of splitmix64
_MASK = (1 << 63) - 1


def sample_cohort(seed: int, round_idx: int, population: int, size: int) -> list[int]:
    """The clients that train in ``round_idx``: ``size`` distinct ids, sorted, a pure function of the inputs.

    Sorting fixes the order in which clients are summed, which keeps results independent of how the cohort is
    later split across devices (up to float re-association).
    """
    if size >= population:
        return list(range(population))
    rng = np.random.default_rng([seed, round_idx])
    return sorted(int(c) for c in rng.choice(population, size=size, replace=False))


def client_seed(seed: int, round_idx: int, cid: int) -> int:
    """A 63-bit seed for one client's round, so its batches do not depend on the device that trains it."""
    x = (seed * _MIX + round_idx) & _MASK
    x = (x * _MIX + cid) & _MASK
    x ^= x >> 31
    return (x * _MIX) & _MASK


def client_generator(seed: int, round_idx: int, cid: int) -> torch.Generator:
    return torch.Generator().manual_seed(client_seed(seed, round_idx, cid))
