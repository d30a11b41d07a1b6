"""x%-non-IID label skew (Hsieh et al., ICML 2020, "The Non-IID Data Quagmire").

A fraction ``skew`` of the data is partitioned by label, so each label's samples sit with one partition; the
remaining ``1 - skew`` is spread iid. ``skew=0`` is iid, ``skew=1`` fully label-partitioned.
"""

from __future__ import annotations

import numpy as np


def label_skew(labels: np.ndarray, num_clients: int, skew: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Labels are dealt to partitions round-robin (label c -> partition c mod num_clients) when there are at
    most as many partitions as labels; with more partitions, each label's skewed share is split among the
    partitions that own it (partition k owns label k mod C).
    """
    classes = np.unique(labels)
    perm = rng.permutation(len(labels))
    n_skewed = round(skew * len(labels))
    skewed, spread = perm[:n_skewed], perm[n_skewed:]
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for i, c in enumerate(classes):
        owners = [k for k in range(num_clients) if k % len(classes) == i] or [i % num_clients]
        idx = skewed[labels[skewed] == c]
        for owner, chunk in zip(owners, np.array_split(idx, len(owners)), strict=True):
            parts[owner].append(chunk)
    for k, chunk in enumerate(np.array_split(spread, num_clients)):
        parts[k].append(chunk)
    return [np.sort(np.concatenate(p)).astype(np.int64) for p in parts]
