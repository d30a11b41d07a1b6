"""Quantity skew: client sizes from Dirichlet(alpha) over clients, labels iid within each client."""

from __future__ import annotations

import numpy as np


def quantity_skew(
    labels: np.ndarray, num_clients: int, alpha: float, min_samples: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Every client first gets ``min_samples`` (or as many as the data allows), then the rest by Dir(alpha)."""
    n = len(labels)
    base = min(min_samples, n // num_clients)
    extra = n - base * num_clients
    sizes = base + np.floor(rng.dirichlet(np.full(num_clients, alpha)) * extra).astype(int)
    sizes[np.argmax(sizes)] += n - sizes.sum()
    cuts = np.cumsum(sizes)[:-1]
    return [np.sort(p) for p in np.split(rng.permutation(n), cuts)]
