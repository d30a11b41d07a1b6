"""CRAIG's subset selection (Mirzasoleiman, Bilmes and Leskovec, 2020, "Coresets for Data-Efficient Training
of Machine Learning Models"): a weighted subset whose gradients stand in for all of a client's.

Given one gradient proxy per sample (the last layer's per-sample gradient, the paper's cheap bound), CRAIG picks
the subset ``S`` maximising the facility-location function ``F(S) = sum_i max_{j in S} s_ij`` with similarity
``s_ij = d_max - ||g_i - g_j||`` by the greedy algorithm (a (1 - 1/e) approximation of the best), and weighs
each chosen ``j`` by ``gamma_j``, the number of samples whose most similar chosen sample it is; training on
``S`` with those weights follows the full gradient to within the facility location's error. As in the paper's
classification experiments the subset is chosen class by class, ``ceil(fraction * n_c)`` of each class.
(apricot implements the same greedy with numba and has had no release since 2021; on a client's few hundred
samples the greedy below is a few matrix operations.)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def facility_location(features: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The greedy ``k`` medoids of ``features`` (n, d) and their weights (how many samples each stands for)."""
    distances = torch.cdist(features, features)
    similarity = distances.max() - distances  # >= 0; a sample is most similar to itself
    n = features.shape[0]
    covered = torch.zeros(n, dtype=similarity.dtype, device=similarity.device)  # max_{j in S} s_ij so far
    index = torch.empty(min(k, n), dtype=torch.long, device=features.device)
    taken = torch.zeros(n, dtype=torch.bool, device=similarity.device)
    for step in range(min(k, n)):  # on the device throughout: no read back per chosen sample
        gains = (similarity - covered[:, None]).clamp_(min=0).sum(dim=0)
        gains.masked_fill_(taken, -1.0)
        j = gains.argmax()  # the first of equal gains, as a sequential scan would take
        index[step] = j
        taken[j] = True
        covered = torch.maximum(covered, similarity.index_select(1, j.view(1)).view(n))
    nearest = similarity[:, index].argmax(dim=1)  # each sample's most similar chosen one
    weights = torch.bincount(nearest, minlength=index.numel()).to(features.dtype)
    return index, weights


def craig(features: Tensor, labels: Tensor, fraction: float) -> tuple[Tensor, Tensor]:
    """Class by class, ``ceil(fraction * n_c)`` of each class's samples (at least one) and their weights: the
    indices into ``features`` in ascending order, and weights summing to the number of samples."""
    indices, weights = [], []
    for label in torch.unique(labels):
        members = torch.nonzero(labels == label).flatten()
        k = max(1, math.ceil(fraction * members.numel()))
        index, weight = facility_location(features[members], k)
        indices.append(members[index])
        weights.append(weight)
    index, weight = torch.cat(indices), torch.cat(weights)
    order = torch.argsort(index)
    return index[order], weight[order]
