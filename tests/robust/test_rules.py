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


def np_trimmed_mean(x: np.ndarray, w: np.ndarray, trim: float = 0.2, weighted: bool = False) -> np.ndarray:
    """Yin et al.'s definition: at each coordinate the floor(trim n) largest and smallest values dropped, the
    rest averaged (with ``weighted``, by their weights, ties ordered by client id)."""
    cut = int(np.floor(trim * len(x)))
    out = np.empty(x.shape[1])
    for j in range(x.shape[1]):
        order = np.argsort(x[:, j], kind="stable")[cut : len(x) - cut]
        out[j] = np.sum(x[order, j] * w[order]) / np.sum(w[order]) if weighted else np.mean(x[order, j])
    return out


def np_krum_scores(x: np.ndarray, f: int) -> np.ndarray:
    n = len(x)
    scores = np.empty(n)
    for i in range(n):
        d = sorted(float(np.sum((x[i] - x[j]) ** 2)) for j in range(n) if j != i)
        scores[i] = sum(d[: n - f - 2])
    return scores


def np_multi_krum(x: np.ndarray, w: np.ndarray, m: int = 5, weighted: bool = False) -> np.ndarray:
    chosen = np.argsort(np_krum_scores(x, F), kind="stable")[:m]
    if not weighted:
        return x[chosen].mean(0)
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


def _gm(rows: GatheredRows) -> torch.Tensor:
    return geometric_median(rows, 50, 1e-6)[0]


RULES: dict[str, tuple[Callable[[GatheredRows], torch.Tensor], Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "median": (coordinate_median, np_median),
    "trimmed_mean": (lambda r: trimmed_mean(r, 0.2), np_trimmed_mean),
    "trimmed_mean_weighted": (
        lambda r: trimmed_mean(r, 0.2, weighted=True),
        lambda x, w: np_trimmed_mean(x, w, weighted=True),
    ),
    "krum": (lambda r: multi_krum(r, F, 1), np_krum),
    "multi_krum": (lambda r: multi_krum(r, F, 5), np_multi_krum),
    "multi_krum_weighted": (
        lambda r: multi_krum(r, F, 5, weighted=True),
        lambda x, w: np_multi_krum(x, w, weighted=True),
    ),
    "bulyan": (lambda r: bulyan(r, F), np_bulyan),
    "geometric_median": (_gm, np_geometric_median),
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


def test_weighted_trimmed_mean_orders_equal_values_by_client_id(tmp_path: Path) -> None:
    """Equal values with unequal weights: which of them the trim drops is the higher client id's, whatever the
    order the clients' rows arrived in (the issue saw 0.28 or 3.75 by order)."""
    values = np.array([[1.0], [1.0], [1.0], [5.0], [-3.0]], dtype=np.float32)
    weights = np.array([1.0, 9.0, 2.0, 1.0, 1.0], dtype=np.float32)
    cids = [4, 7, 9, 11, 12]
    results = []
    for order in ([0, 1, 2, 3, 4], [4, 3, 2, 1, 0], [2, 0, 4, 1, 3]):
        rows = GatheredRows(cids, 1, 1 << 20, tmp_path / "s", torch.device("cpu"))
        for i in order:
            rows.put_([cids[i]], torch.from_numpy(values[i : i + 1]), torch.from_numpy(weights[i : i + 1]))
        results.append(float(trimmed_mean(rows, 0.2, weighted=True)[0]))
    # by hand: sorted stably by value, ids 12 (-3), 4, 7, 9 (1 each), 11 (5); cut 1 each end: 4, 7, 9 kept
    assert results == [pytest.approx(1.0)] * 3
    np.testing.assert_allclose(np_trimmed_mean(values.astype(np.float64), weights, weighted=True), [1.0])
    assert float(trimmed_mean(_one(values, weights, cids, tmp_path), 0.2)[0]) == pytest.approx(1.0)


def _one(values: np.ndarray, weights: np.ndarray, cids: list[int], tmp_path: Path) -> GatheredRows:
    rows = GatheredRows(cids, values.shape[1], 1 << 20, tmp_path / "s", torch.device("cpu"))
    rows.put_(cids, torch.from_numpy(values), torch.from_numpy(weights))
    return rows


def test_the_geometric_median_runs_to_its_tolerance_and_reports_a_capped_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: 30% Gaussian noise of std 1e6 among small honest updates. Eight fixed steps end far from
    the honest updates; run to the tolerance, the estimate is near Weiszfeld's fixed point (numpy, 2000 steps),
    and a cap that stops it first is reported."""
    from fedsim.robust.geometric_median import GeometricMedian, GeometricMedianConfig

    rng = np.random.default_rng(7)
    honest = rng.normal(0.05, 0.02, size=(14, 40))
    noise = rng.normal(0, 1e6, size=(6, 40))
    x = np.concatenate([honest, noise]).astype(np.float32)
    w = np.ones(len(x), dtype=np.float32)
    fixed_point = np_geometric_median(x.astype(np.float64), w.astype(np.float64), iterations=2000)
    rows = _one(x, w, list(range(len(x))), tmp_path)
    converged = GeometricMedian(GeometricMedianConfig(), 40, torch.device("cpu"))
    got = converged.aggregate(rows).double().numpy()
    assert np.linalg.norm(got - fixed_point) < 1e-3 * np.linalg.norm(fixed_point)
    assert np.linalg.norm(got - honest.mean(0)) < 0.2 and converged.report() == {"capped_rounds": []}
    capped = GeometricMedian(GeometricMedianConfig(iterations=8), 40, torch.device("cpu"))
    capped.notes.announce = True
    short = capped.aggregate(rows).double().numpy()
    capped.aggregate(rows)
    # the old fixed 8 steps: farther from the honest mean than the honest mean is long
    assert np.linalg.norm(short - honest.mean(0)) > np.linalg.norm(honest.mean(0))
    assert capped.report() == {"capped_rounds": [0, 0]}
    err = capsys.readouterr().err  # said once on stderr, every capped round counted in the report
    assert err.count("stopped at iterations=8 before tolerance") == 1, err
