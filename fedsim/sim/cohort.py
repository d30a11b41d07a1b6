"""Deterministic cohort sampling and per-client random streams."""

from __future__ import annotations

import numpy as np
import torch

_MIX = 0x9E3779B97F4A7C15  # golden-ratio constant of splitmix64
_MASK = (1 << 63) - 1


def sample_cohort(seed: int, round_idx: int, population: int, size: int, availability: float = 1.0) -> list[int]:
    """The clients that train in ``round_idx``: ``size`` distinct ids, sorted, a pure function of the inputs.

    With ``availability < 1`` each client is reachable this round with that probability and the cohort is
    drawn from the reachable ones (smaller if too few are). Sorting fixes the order in which clients are
    summed, which keeps results independent of how the cohort is split across devices (up to float
    re-association).
    """
    rng = np.random.default_rng([seed, round_idx])
    if availability >= 1.0:  # O(size): numpy draws indices without building the population (Floyd's method
        # for a small share of a large one); the same cohorts as choosing from np.arange(population)
        if size >= population:
            return list(range(population))
        return sorted(int(c) for c in rng.choice(population, size=size, replace=False))
    pool = np.flatnonzero(rng.random(population) < availability)  # still O(population): issue 26
    if size >= len(pool):
        return [int(c) for c in pool]
    return sorted(int(c) for c in rng.choice(pool, size=size, replace=False))


def dropped_clients(seed: int, round_idx: int, cohort: list[int], dropout: float) -> set[int]:
    """Cohort members that drop out this round (they contribute nothing; their state stays as it was)."""
    if dropout <= 0.0:
        return set()
    rng = np.random.default_rng([seed, round_idx, 1])
    return {cid for cid, u in zip(cohort, rng.random(len(cohort)), strict=True) if u < dropout}


def client_seed(seed: int, round_idx: int, cid: int) -> int:
    """A 63-bit seed for one client's round, so its batches do not depend on the device that trains it."""
    x = (seed * _MIX + round_idx) & _MASK
    x = (x * _MIX + cid) & _MASK
    x ^= x >> 31
    return (x * _MIX) & _MASK


def client_generator(seed: int, round_idx: int, cid: int) -> torch.Generator:
    return torch.Generator().manual_seed(client_seed(seed, round_idx, cid))
