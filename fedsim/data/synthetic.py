"""Synthetic(alpha, beta) of the FedProx paper (Li et al., MLSys 2020, Section 5.1), as LEAF generates it.

Client k has its own linear model, ``W_k, b_k ~ N(u_k, 1)`` with ``u_k ~ N(0, alpha)`` (model heterogeneity),
and its own features, ``x ~ N(v_k, Sigma)`` with ``v_k ~ N(B_k, 1)``, ``B_k ~ N(0, beta)`` and
``Sigma_jj = j^-1.2`` (data heterogeneity); ``y = argmax(softmax(W_k^T x + b_k))``.
"""

from __future__ import annotations

import numpy as np
import torch

from fedsim.config import SyntheticData
from fedsim.data.base import ArrayDataset, ClientData


def synthetic(cfg: SyntheticData, seed: int) -> ArrayDataset:
    """Client sizes are lognormal with mean about ``cfg.mean_samples`` (at least 4, so each keeps a test share)."""
    rng = np.random.default_rng(seed)
    d, c = cfg.features, cfg.classes
    sigma = np.arange(1, d + 1, dtype=np.float64) ** -1.2
    sizes = np.maximum(rng.lognormal(np.log(cfg.mean_samples) - 0.5, 1.0, cfg.clients).astype(int), 4)
    xs, ys, parts, test_x, test_y = [], [], [], [], []
    offset = 0
    for k in range(cfg.clients):
        u = rng.normal(0.0, np.sqrt(cfg.alpha))
        w = rng.normal(u, 1.0, (d, c))
        b = rng.normal(u, 1.0, c)
        v = rng.normal(rng.normal(0.0, np.sqrt(cfg.beta)), 1.0, d)
        x = rng.normal(v, np.sqrt(sigma), (sizes[k], d)).astype(np.float32)
        y = np.argmax(x @ w + b, axis=1).astype(np.int64)
        n_test = max(1, round(cfg.test_fraction * sizes[k]))
        test_x.append(x[:n_test])
        test_y.append(y[:n_test])
        xs.append(x[n_test:])
        ys.append(y[n_test:])
        parts.append(np.arange(offset, offset + sizes[k] - n_test))
        offset += sizes[k] - n_test
    test = ClientData(torch.from_numpy(np.concatenate(test_x)), torch.from_numpy(np.concatenate(test_y)))
    return ArrayDataset(np.concatenate(xs), np.concatenate(ys), parts, test, num_classes=c)
