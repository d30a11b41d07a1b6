"""Shards (McMahan et al. 2017): sort by label, cut into shards, deal ``labels_per_client`` to each client."""

from __future__ import annotations

import numpy as np


def shards(labels: np.ndarray, num_clients: int, labels_per_client: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = np.argsort(labels, kind="stable")
    pieces = np.array_split(order, num_clients * labels_per_client)
    dealt = rng.permutation(len(pieces)).reshape(num_clients, labels_per_client)
    return [np.sort(np.concatenate([pieces[s] for s in row])) for row in dealt]
