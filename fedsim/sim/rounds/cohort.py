"""Deterministic cohort sampling and per-client random streams.

A round's cost is set by its cohort, never by the population: a cohort is drawn without building the
population, and whether a client is reachable (``availability``) is a keyed hash of (seed, round, client)
asked only of the clients the draw reaches.
"""

from __future__ import annotations

import numpy as np
import torch

_MIX = 0x9E3779B97F4A7C15  # golden-ratio constant of splitmix64
_MASK = (1 << 63) - 1
_POISSON = 0x506F  # the key of the stream that draws a Poisson cohort's size
_U64 = np.uint64


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, elementwise over uint64 (wrapping arithmetic)."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def reachable(seed: int, round_idx: int, cids: np.ndarray, availability: float) -> np.ndarray:
    """Which of ``cids`` are reachable in ``round_idx``: each with probability ``availability``, independently,
    decided by a keyed hash of (seed, round, client) so that it costs nothing per unasked client."""
    key = _splitmix64(np.array([seed & ((1 << 64) - 1)], dtype=_U64) ^ _U64(_MIX))
    key = _splitmix64(key ^ _U64(round_idx & ((1 << 64) - 1)))
    with np.errstate(over="ignore"):
        u = _splitmix64(key ^ (np.asarray(cids, dtype=_U64) * _U64(_MIX)))
    return (u >> _U64(11)).astype(np.float64) * 2.0**-53 < availability


def sample_cohort(
    seed: int, round_idx: int, population: int, size: int, availability: float = 1.0, sampling: str = "fixed"
) -> list[int]:
    """The clients that train in ``round_idx``: ``size`` distinct ids, sorted, a pure function of the inputs.

    ``sampling="poisson"``: each client joins independently with probability ``size / population`` (the
    sampling DP's accountants amplify): the cohort's size is drawn from Binomial(population, q), from a stream
    of its own, and that many clients are drawn uniformly as below, which is the same distribution in O(cohort).

    With ``availability < 1`` each client is reachable this round with that probability (``reachable``) and
    the cohort is a uniform draw of ``size`` of the reachable ones (all of them if fewer are): the clients are
    visited in a uniformly random order and the first ``size`` reachable ones kept, so the work is about
    ``size / availability`` clients, or the population when that is smaller. Sorting fixes the order in which
    clients are summed, which keeps results independent of how the cohort is split across devices (up to
    float re-association).
    """
    if sampling == "poisson":
        size = int(np.random.default_rng([seed, round_idx, _POISSON]).binomial(population, size / population))
    rng = np.random.default_rng([seed, round_idx])
    if availability >= 1.0:  # O(size): numpy draws indices without building the population (Floyd's method
        # for a small share of a large one); the same cohorts as choosing from np.arange(population)
        if size >= population:
            return list(range(population))
        return sorted(int(c) for c in rng.choice(population, size=size, replace=False))
    if 4 * size >= population * availability:  # the draw would visit a good share of the population anyway
        order = rng.permutation(population)
        return sorted(int(c) for c in order[reachable(seed, round_idx, order, availability)][:size])
    return sorted(_first_reachable(rng, seed, round_idx, population, size, availability))


def _first_reachable(
    rng: np.random.Generator, seed: int, round_idx: int, population: int, size: int, availability: float
) -> list[int]:
    """The first ``size`` reachable clients of a uniformly random order of the population, drawn lazily: ids
    are drawn uniformly and a repeat is skipped, which visits distinct clients in a uniformly random order.
    Should the draw pass half the population (too few reachable clients, vanishingly rare), the order is
    completed by a random permutation of the clients not yet visited, which keeps it uniform and finite."""
    seen: dict[int, None] = {}  # insertion-ordered: the order of the visit
    kept: list[int] = []
    while len(kept) < size:
        if 2 * len(seen) > population:
            visited = np.fromiter(seen, dtype=np.int64, count=len(seen))
            rest = rng.permutation(np.setdiff1d(np.arange(population), visited, assume_unique=True))
            order = np.concatenate([visited, rest])
            return [int(c) for c in order[reachable(seed, round_idx, order, availability)][:size]]
        batch = rng.integers(0, population, size=int((size - len(kept)) / availability * 1.25) + 16)
        for cid, ok in zip(batch.tolist(), reachable(seed, round_idx, batch, availability).tolist(), strict=True):
            if cid in seen:
                continue
            seen[cid] = None
            if ok:
                kept.append(cid)
                if len(kept) == size:
                    break
    return kept


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
