"""Gavel's policies against the same linear programmes solved directly with scipy's linprog (HiGHS)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from fedsim.sweep.gavel import max_min_fairness, min_makespan, proportional

CASES = [
    (np.array([[1.0, 4.0], [1.0, 1.5], [2.0, 2.0]]), np.array([1.0, 1.0])),
    (np.array([[4.0, 2.0, 1.0], [3.0, 2.5, 1.0], [6.0, 2.0, 1.5], [1.0, 1.0, 1.0]]), np.array([2.0, 1.0, 3.0])),
]


def _epigraph(coeffs: np.ndarray, counts: np.ndarray, scale: np.ndarray) -> float:
    """max t s.t. t <= sum_j coeffs[m, j] x[m, j] for every m, the base constraints: variables x (m*n) then t."""
    m, n = coeffs.shape
    c = np.zeros(m * n + 1)
    c[-1] = -1.0
    rows, bounds = [], []
    for i in range(m):  # t - coeffs_i . x_i <= 0
        row = np.zeros(m * n + 1)
        row[i * n : (i + 1) * n] = -coeffs[i]
        row[-1] = 1.0
        rows.append(row)
        bounds.append(0.0)
    for i in range(m):  # sum_j x_ij <= 1
        row = np.zeros(m * n + 1)
        row[i * n : (i + 1) * n] = 1.0
        rows.append(row)
        bounds.append(1.0)
    for j in range(n):  # sum_i scale_i x_ij <= counts_j
        row = np.zeros(m * n + 1)
        row[j : m * n : n] = scale
        rows.append(row)
        bounds.append(counts[j])
    result = linprog(c, A_ub=np.array(rows), b_ub=np.array(bounds), bounds=[(0, None)] * (m * n + 1), method="highs")
    assert result.status == 0
    return float(-result.fun)


@pytest.mark.parametrize(("throughputs", "counts"), CASES)
def test_max_min_fairness_reaches_the_programmes_optimum(throughputs: np.ndarray, counts: np.ndarray) -> None:
    m = throughputs.shape[0]
    scale = np.ones(m)
    fair = (throughputs * proportional(counts, m)).sum(axis=1)
    best = _epigraph(throughputs / fair[:, None], counts, scale)
    allocation = max_min_fairness(throughputs, counts)
    assert allocation.objective == pytest.approx(best, rel=1e-5)
    assert (allocation.throughputs(throughputs) / fair).min() == pytest.approx(best, rel=1e-4)
    assert (allocation.shares.sum(axis=1) <= 1 + 1e-6).all() and (allocation.shares.sum(axis=0) <= counts + 1e-6).all()


@pytest.mark.parametrize(("throughputs", "counts"), CASES)
def test_min_makespan_reaches_the_programmes_optimum(throughputs: np.ndarray, counts: np.ndarray) -> None:
    steps = np.arange(1, throughputs.shape[0] + 1) * 100.0
    best = 1.0 / _epigraph(throughputs / steps[:, None], counts, np.ones(len(steps)))
    allocation = min_makespan(throughputs, counts, steps)
    assert allocation.objective == pytest.approx(best, rel=1e-5)
    assert (steps / allocation.throughputs(throughputs)).max() == pytest.approx(best, rel=1e-4)


def test_a_run_goes_where_it_is_fastest_relative_to_the_others() -> None:
    """Run 0 gains 4x from type 1, run 1 nothing: a heterogeneity-aware allocation gives type 1 to run 0."""
    allocation = max_min_fairness(np.array([[1.0, 4.0], [1.0, 1.0]]), np.array([1.0, 1.0]))
    assert allocation.shares[0, 1] > 0.5 > allocation.shares[1, 1]


def test_bad_inputs_say_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        max_min_fairness(np.ones((2, 3)), np.ones(2))
    with pytest.raises(ValueError, match="finite"):
        max_min_fairness(np.array([[np.nan, 1.0]]), np.ones(2))
    with pytest.raises(ValueError, match="steps must be"):
        min_makespan(np.ones((2, 2)), np.ones(2), np.array([1.0, -1.0]))
