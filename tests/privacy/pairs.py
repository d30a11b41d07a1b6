"""The privacy loss of concrete pairs of neighbouring populations, computed here from the pairs' own output
densities, independently of fedsim's accountant and of the dp-accounting events it builds.

Each pair differs in one client, and every other client's clipped update is the same in both, so a round's
release (the noised sum, and under adaptive clipping the noised count) differs only along one direction, in
which it is a one-dimensional Gaussian (shifted by ``shift`` noise standard deviations when the differing
client takes part, with probability ``q``) against a standard Gaussian. Rounds compose as the same pair (the
clients' updates may be chosen from the public state, the clip among it), so the pair's epsilon after T rounds
is the T-fold composition of that pair. Its hockey-stick divergence is computed by discretising the output
line into bins (a post-processing of the release, so it can only lower the divergence), building a
dp-accounting privacy loss distribution from the two probability mass functions with optimistic rounding, and
composing it; both directions of the pair are taken. The result is a lower bound on the epsilon of any
mechanism that releases this pair: a sound accountant reports at least as much.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
from dp_accounting.pld import privacy_loss_distribution
from scipy import stats

BIN = 2e-3  # the output line's bins, in noise standard deviations
LOSS_STEP = 1e-3  # the privacy loss's grid
TAILS = 12.0  # noise standard deviations beyond which the outer bins hold the rest of the mass


def _log_bins(edges: np.ndarray, mean: float) -> np.ndarray:
    """The log of N(mean, 1)'s mass in each bin between ``edges``, the outer bins holding the tails; in log
    space throughout, so that no far bin's mass underflows to 0 (which would make its privacy loss infinite
    and the bound no lower bound)."""
    x = edges - mean
    low = stats.norm.logcdf(x)  # log P(X < edge)
    high = stats.norm.logsf(x)  # log P(X > edge)
    left = x[1:] <= 0  # bins left of the mean: differences of the lower tails, else of the upper ones
    with np.errstate(divide="ignore"):
        inner = np.where(
            left,
            low[1:] + np.log1p(-np.exp(np.minimum(low[:-1] - low[1:], 0.0))),
            high[:-1] + np.log1p(-np.exp(np.minimum(high[1:] - high[:-1], 0.0))),
        )
    inner[0], inner[-1] = low[1], high[-2]  # the outer bins reach to minus and plus infinity
    return inner


def mixture_epsilon(shift: float, q: float, rounds: int, delta: float, step: float = LOSS_STEP) -> float:
    """Epsilon at ``delta`` of ``rounds`` compositions of N(0, 1) against (1 - q) N(0, 1) + q N(shift, 1), the
    privacy loss rounded down to multiples of ``step`` (coarser: faster, and a lower bound still)."""
    shift = abs(shift)
    edges = np.arange(-TAILS, shift + TAILS + BIN, BIN)
    alone = _log_bins(edges, 0.0)
    moved = _log_bins(edges, shift)
    mixed = alone if q == 0 else moved if q == 1 else np.logaddexp(math.log1p(-q) + alone, math.log(q) + moved)
    best = 0.0
    for upper, lower in ((alone, mixed), (mixed, alone)):
        with np.errstate(over="ignore", divide="ignore"):  # far bins' losses are large, not wrong
            pld = privacy_loss_distribution.from_two_probability_mass_functions(
                dict(enumerate(lower)),
                dict(enumerate(upper)),
                pessimistic_estimate=False,
                value_discretization_interval=step,
            )
            best = max(best, pld.self_compose(rounds).get_epsilon_for_delta(delta))
    return float(best)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """The Gaussian mechanism's exact epsilon at ``delta`` for a shift of ``mu`` noise standard deviations
    (Balle and Wang 2018, Theorem 8): delta = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu), solved at 40
    digits (in floats the difference of the two terms loses about 1e-7 of epsilon near epsilon 2)."""
    with mpmath.workdps(40):
        m = mpmath.mpf(mu)

        def excess(epsilon: mpmath.mpf) -> mpmath.mpf:
            return mpmath.ncdf(m / 2 - epsilon / m) - mpmath.exp(epsilon) * mpmath.ncdf(-m / 2 - epsilon / m) - delta

        if excess(mpmath.mpf(0)) <= 0:
            return 0.0
        low, high = mpmath.mpf(0), mpmath.mpf(1)
        while excess(high) > 0:
            high *= 2
        for _ in range(80):  # bisection: the root within high / 2**80
            middle = (low + high) / 2
            low, high = (middle, high) if excess(middle) > 0 else (low, middle)
        return float(low)  # the lower end: never above the truth, below it by at most 2**-80 of the bracket
