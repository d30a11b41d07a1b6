"""Per-class Dirichlet split (Hsu et al. 2019): class c's samples go to clients in Dir(alpha) proportions."""

from __future__ import annotations

import numpy as np


def dirichlet(labels: np.ndarray, num_clients: int, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Small ``alpha`` gives each client few classes; large ``alpha`` tends to iid.

    Draws are repeated (up to 100 times) until every client holds at least one sample; if that still fails,
    the largest clients give one sample each to the empty ones, so the partition is always complete.
    """
    parts: list[list[int]] = []
    for _ in range(100):
        parts = [[] for _ in range(num_clients)]
        for c in np.unique(labels):
            idx = rng.permutation(np.flatnonzero(labels == c))
            shares = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(shares)[:-1] * len(idx)).astype(int)
            for client, chunk in enumerate(np.split(idx, cuts)):
                parts[client].extend(chunk.tolist())
        if min(len(p) for p in parts) > 0:
            break
    else:
        for p in parts:
            if not p:
                donor = max(parts, key=len)
                p.append(donor.pop())
    return [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
