"""Krum and multi-Krum (Blanchard et al., NeurIPS 2017): each update is scored by the sum of its squared
distances to its ``n - f - 2`` nearest other updates; Krum takes the best-scored update, multi-Krum the ``m``
best, averaged with their clients' weights (as Flower's ``Krum`` strategy does). Defined for ``n >= 2f + 3``."""

from __future__ import annotations

import torch
from torch import Tensor

from fedsim.robust.gather import GatheredRows


def krum_scores(distances: Tensor, f: int) -> Tensor:
    """(n,) each row's sum of squared distances to its ``n - f - 2`` nearest others; ``distances`` (n, n)."""
    n = distances.shape[0]
    nearest = max(n - f - 2, 1)
    others = distances + torch.diag(torch.full((n,), float("inf"), dtype=distances.dtype, device=distances.device))
    return others.sort(dim=1).values[:, :nearest].sum(1)


def krum_selection(distances: Tensor, f: int, m: int) -> list[int]:
    """The ``m`` best-scored rows, best first (ties to the lower index)."""
    scores = krum_scores(distances, f)
    return sorted(range(distances.shape[0]), key=lambda i: (float(scores[i]), i))[:m]


def multi_krum(rows: GatheredRows, f: int, m: int) -> Tensor:
    chosen = torch.tensor(krum_selection(rows.squared_distances(), f, m), device=rows.device)
    weights = rows.weights[chosen]
    out = torch.empty(rows.rows.shape[1], device=rows.device)
    for lo, hi, block in rows.blocks():
        out[lo:hi] = weights @ block[chosen] / weights.sum()
    return out
