"""IID: a random permutation cut into near-equal parts."""

from __future__ import annotations

import numpy as np


def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    return [np.sort(p) for p in np.array_split(rng.permutation(len(labels)), num_clients)]
