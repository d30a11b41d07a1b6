"""Each aggregation rule against a direct numpy implementation of its paper's definition, on fixed inputs, with
the gathered updates in memory and spilled to a memory-mapped file under a small budget."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from fedsim.robust.bulyan import bulyan
from fedsim.robust.clipping import centered_clip_, norm_bound_
from fedsim.robust.gather import GatheredRows
from fedsim.robust.geometric_median import geometric_median
from fedsim.robust.krum import multi_krum
from fedsim.robust.median import coordinate_median
from fedsim.robust.trimmed_mean import trimmed_mean

N, D, F = 11, 37, 2
RNG = np.random.default_rng(3)
X = RNG.normal(size=(N, D)).astype(np.float32)
X[0] += 25.0  # an outlier the robust rules should not follow
W = RNG.integers(1, 50, size=N).astype(np.float32)
CIDS = [int(c) for c in RNG.permutation(1000)[:N]]  # ids that are not positions


def _rows(tmp_path: Path, budget: int) -> GatheredRows:
    """The updates gathered in client order: row i is client CIDS[i]'s, put in a scrambled order."""
    rows = GatheredRows(CIDS, D, budget, tmp_path / "spill.f32", torch.device("cpu"))
    for i in reversed(range(N)):
        rows.put_([CIDS[i]], torch.from_numpy(X[i : i + 1]), torch.from_numpy(W[i : i + 1]))
    return rows


def _in_client_order() -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(CIDS)
    return X[order].astype(np.float64), W[order].astype(np.float64)


def np_median(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return np.median(x, axis=0)


def np_trimmed_mean(x: np.ndarray, w: np.ndarray, trim: float = 0.2) -> np.ndarray:
    cut = int(np.floor(trim * len(x)))
    out = np.empty(x.shape[1])
    for j in range(x.shape[1]):
        order = np.argsort(x[:, j], kind="stable")[cut : len(x) - cut]
        out[j] = np.sum(x[order, j] * w[order]) / np.sum(w[order])
    return out


def np_krum_scores(x: np.ndarray, f: int) -> np.ndarray:
    n = len(x)
    scores = np.empty(n)
    for i in range(n):
        d = sorted(float(np.sum((x[i] - x[j]) ** 2)) for j in range(n) if j != i)
        scores[i] = sum(d[: n - f - 2])
    return scores


def np_multi_krum(x: np.ndarray, w: np.ndarray, m: int = 5) -> np.ndarray:
    chosen = np.argsort(np_krum_scores(x, F), kind="stable")[:m]
    return np.sum(x[chosen] * w[chosen, None], axis=0) / np.sum(w[chosen])


def np_krum(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x[int(np.argmin(np_krum_scores(x, F)))]


def np_bulyan(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    remaining, picked = list(range(len(x))), []
    for _ in range(len(x) - 2 * F):
        sub = x[remaining]
        best = remaining[int(np.argmin(np_krum_scores(sub, F)))]
        picked.append(best)
        remaining.remove(best)
    s = x[picked]
    beta = len(picked) - 2 * F
    med = np.median(s, axis=0)
    out = np.empty(x.shape[1])
    for j in range(x.shape[1]):
        nearest = np.argsort(np.abs(s[:, j] - med[j]), kind="stable")[:beta]
        out[j] = s[nearest, j].mean()
    return out


def np_geometric_median(x: np.ndarray, w: np.ndarray, iterations: int = 50, nu: float = 1e-6) -> np.ndarray:
    alpha = w / w.sum()
    v = alpha @ x
    for _ in range(iterations):
        beta = alpha / np.maximum(nu, np.linalg.norm(x - v, axis=1))
        v = beta @ x / beta.sum()
    return v


RULES: dict[str, tuple[Callable[[GatheredRows], torch.Tensor], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "median": (coordinate_median, np_median),
    "trimmed_mean": (lambda r: trimmed_mean(r, 0.2), np_trimmed_mean),
    "krum": (lambda r: multi_krum(r, F, 1), np_krum),
    "multi_krum": (lambda r: multi_krum(r, F, 5), np_multi_krum),
    "bulyan": (lambda r: bulyan(r, F), np_bulyan),
    "geometric_median": (lambda r: geometric_median(r, 50, 1e-6), np_geometric_median),
}


@pytest.mark.parametrize("name", list(RULES))
@pytest.mark.parametrize("budget", [1 << 20, 4 * N * 5], ids=["in-memory", "spilled"])
def test_each_rule_is_its_papers_definition(name: str, budget: int, tmp_path: Path) -> None:
    rule, direct = RULES[name]
    rows = _rows(tmp_path, budget)
    assert rows.spilled == (budget < 4 * N * D)
    x, w = _in_client_order()
    expected = direct(x, w)
    got = rule(rows).double().numpy()
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)
    assert np.abs(expected).max() < 10  # the outlier (row 0, +25) did not carry the aggregate


def test_spilled_rows_hold_at_most_the_budget_in_memory_at_once(tmp_path: Path) -> None:
    budget = 4 * N * 5  # five columns of eleven floats
    rows = _rows(tmp_path, budget)
    assert rows.spilled and not (tmp_path / "spill.f32").exists()  # mapped, and nothing left on disk
    blocks = list(rows.blocks())
    assert len(blocks) == -(-D // 5) and max(b.numel() * 4 for _, _, b in blocks) <= budget
    np.testing.assert_array_equal(torch.cat([b for _, _, b in blocks], dim=1).numpy(), X[np.argsort(CIDS)])


def test_norm_bound_and_centered_clip_are_their_formulas() -> None:
    x = torch.from_numpy(X.copy())
    norm_bound_(x, 3.0)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    np.testing.assert_allclose(x.numpy(), X * np.minimum(1.0, 3.0 / norms), rtol=1e-6, atol=1e-6)
    centre = torch.from_numpy(RNG.normal(size=D).astype(np.float32))
    y = torch.from_numpy(X.copy())
    centered_clip_(y, centre, 2.0)
    diff = X - centre.numpy()
    expected = centre.numpy() + diff * np.minimum(1.0, 2.0 / np.linalg.norm(diff, axis=1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)
