"""A uniformly random subset of a client's samples, class by class: the baseline a coreset method is measured
against. As CRAIG's (:mod:`fedsim.data.craig`) it keeps ``ceil(fraction * n_c)`` of each class's ``n_c`` samples
(at least one), and each chosen sample of class ``c`` weighs ``n_c / k_c``, so the weights sum to the samples."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor


def stratified_subset(labels: Tensor, fraction: float, seed: int) -> tuple[Tensor, Tensor]:
    """The indices (ascending) and weights of a class-stratified uniform subset, drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    y = labels.cpu().numpy()
    indices, weights = [], []
    for label in np.unique(y):
        members = np.flatnonzero(y == label)
        k = max(1, math.ceil(fraction * members.size))
        indices.append(rng.choice(members, size=k, replace=False))
        weights.append(np.full(k, members.size / k))
    index, weight = np.concatenate(indices), np.concatenate(weights)
    order = np.argsort(index)
    return (
        torch.from_numpy(index[order]).to(labels.device),
        torch.from_numpy(weight[order]).to(device=labels.device, dtype=torch.float32),
    )
