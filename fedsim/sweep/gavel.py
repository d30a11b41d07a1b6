"""Gavel's allocation policies (Narayanan et al., OSDI 2020) as cvxpy linear programmes.

``throughputs[m, j]`` is run ``m``'s steps per second on one device of type ``j`` (measured, or emulated);
``counts[j]`` how many devices of type ``j`` the pool has; ``scale[m]`` how many devices run ``m`` needs at
once. An allocation ``X[m, j]`` is the share of time run ``m`` spends on type ``j``: ``X >= 0``, each run's
shares sum to at most 1, and each type's shares, each weighted by its run's scale, to at most its count.
A run's *effective throughput* is ``sum_j throughputs[m, j] X[m, j]``.

- ``max_min_fairness``: maximise the least effective throughput, each normalised by what the run would get
  from the proportional allocation (every run an equal share of every type, as Gavel's ``Proportional``
  policy), and weighted by its scale, as Gavel's ``MaxMinFairness_Perf``.
- ``min_makespan``: the allocation under which the last run to finish, ``max_m steps[m] / throughput(m, X)``,
  finishes first. Gavel finds it by bisection on the makespan over feasibility programmes; maximising
  ``z`` subject to ``throughput(m, X) >= steps[m] z`` is the same optimum as one linear programme
  (``z = 1 / makespan``).
"""

from __future__ import annotations

from dataclasses import dataclass

import cvxpy as cp
import numpy as np


@dataclass(frozen=True)
class Allocation:
    shares: np.ndarray  # (runs, device types): X
    objective: float  # the programme's optimum: the least normalised throughput, or the makespan in seconds

    def throughputs(self, throughputs: np.ndarray) -> np.ndarray:
        """Each run's effective throughput under these shares."""
        return (np.asarray(throughputs, dtype=float) * self.shares).sum(axis=1)


def proportional(counts: np.ndarray, runs: int) -> np.ndarray:
    """Every run an equal share of every type, scaled so that the largest run's shares sum to 1 (Gavel's
    normaliser: with more runs than devices it asks for more than the pool has, so it is a yardstick, not an
    allocation)."""
    x = np.tile(np.asarray(counts, dtype=float) / runs, (runs, 1))
    return x / x.sum(axis=1).max()


def _checked(throughputs: np.ndarray, counts: np.ndarray, scale: np.ndarray | None) -> tuple[np.ndarray, ...]:
    t = np.asarray(throughputs, dtype=float)
    c = np.asarray(counts, dtype=float)
    s = np.ones(t.shape[0]) if scale is None else np.asarray(scale, dtype=float)
    if t.ndim != 2 or c.shape != (t.shape[1],) or s.shape != (t.shape[0],):
        raise ValueError(f"throughputs {t.shape}, counts {c.shape} and scale {s.shape} do not fit (runs, types)")
    if not (np.isfinite(t).all() and (t >= 0).all() and (c > 0).all() and (s >= 1).all()):
        raise ValueError("throughputs must be finite and >= 0, counts > 0 and scales >= 1")
    if not (t.sum(axis=1) > 0).all():
        raise ValueError("every run needs a positive throughput on some device type")
    return t, c, s


def _base(x: cp.Variable, counts: np.ndarray, scale: np.ndarray) -> list[cp.Constraint]:
    return [x >= 0, cp.sum(x, axis=1) <= 1, cp.sum(cp.multiply(scale[:, None], x), axis=0) <= counts]


def _solved(problem: cp.Problem, x: cp.Variable, what: str) -> np.ndarray:
    problem.solve(solver=cp.CLARABEL)
    if problem.status != cp.OPTIMAL or x.value is None:
        raise RuntimeError(f"gavel {what}: the programme ended {problem.status}")
    return np.clip(x.value, 0.0, 1.0)


def max_min_fairness(throughputs: np.ndarray, counts: np.ndarray, scale: np.ndarray | None = None) -> Allocation:
    t, c, s = _checked(throughputs, counts, scale)
    fair = (t * proportional(c, t.shape[0])).sum(axis=1)
    weights = t * s[:, None] / fair[:, None]
    x = cp.Variable(t.shape)
    problem = cp.Problem(cp.Maximize(cp.min(cp.sum(cp.multiply(weights, x), axis=1))), _base(x, c, s))
    shares = _solved(problem, x, "max-min fairness")
    return Allocation(shares, float(problem.value))


def min_makespan(
    throughputs: np.ndarray, counts: np.ndarray, steps: np.ndarray, scale: np.ndarray | None = None
) -> Allocation:
    t, c, s = _checked(throughputs, counts, scale)
    work = np.asarray(steps, dtype=float)
    if work.shape != (t.shape[0],) or not (np.isfinite(work).all() and (work > 0).all()):
        raise ValueError(f"steps must be one positive finite count per run, got shape {work.shape}")
    x, z = cp.Variable(t.shape), cp.Variable()
    constraints = [*_base(x, c, s), cp.sum(cp.multiply(t, x), axis=1) >= work * z]
    problem = cp.Problem(cp.Maximize(z), constraints)
    shares = _solved(problem, x, "makespan")
    return Allocation(shares, 1.0 / float(problem.value))
