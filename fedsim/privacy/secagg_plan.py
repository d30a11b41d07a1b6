"""What dropout a SecAgg+ setting tolerates, for the plan printed before a run trains.

A round of SecAgg+ (Bell et al. 2020, as Flower and fedsim run it) gives each client's two secrets to the
``k`` clients of its ring neighbourhood (itself included; ``k = num_shares`` made odd), and the server can
unmask the sum only when, for every client of the cohort, at least ``t = reconstruction_threshold`` of those
holders are still there. With each client leaving independently with probability ``p``, the chance a round
fails is estimated here by drawing rounds (seeded, so the plan prints the same figures every time); when the
neighbourhood is the whole cohort it is the binomial tail, which the tests hold it to.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

RATES = (0.01, 0.05, 0.1, 0.2, 0.3, 0.5)
TRIALS = 4000


def ring_shares(num_shares: int, cohort: int) -> int:
    """Holders of each secret: ``num_shares`` made odd (one neighbourhood either side), at most the cohort."""
    return min(num_shares + (num_shares % 2 == 0), cohort)


def failure_rate(
    cohort: int, shares: int, threshold: int, dropout: float, trials: int = TRIALS, seed: int = 0
) -> float:
    """The share of ``trials`` rounds of ``cohort`` clients on a ring (each secret held by the ``shares``
    clients around its owner) in which some client keeps fewer than ``threshold`` holders after each client
    leaves with probability ``dropout``."""
    if threshold > shares or cohort < 2:
        return 1.0
    rng = np.random.default_rng(seed)
    alive = (rng.random((trials, cohort)) >= dropout).astype(np.int32)
    half = shares // 2
    held = np.zeros_like(alive)
    for offset in range(-half, shares - half):  # each client's window of holders on the ring
        held += np.roll(alive, offset, axis=1)
    return float((held.min(axis=1) < threshold).mean())


def tolerance(cohort: int, num_shares: int, threshold: int, rates: Sequence[float] = RATES) -> str:
    """One line for the plan: the failed-round rate at each dropout rate, and the highest that keeps it under 1%."""
    shares = ring_shares(num_shares, cohort)
    rates_failed = [(rate, failure_rate(cohort, shares, threshold, rate)) for rate in rates]
    shown = ", ".join(f"{rate:.0%} -> {failed:.1%}" for rate, failed in rates_failed)
    safe = [rate for rate, failed in rates_failed if failed < 0.01]
    verdict = f"under 1% of rounds fail up to {max(safe):.0%} dropout" if safe else "over 1% of rounds fail at 1%"
    return (
        f"SecAgg+: each secret held by {shares} of the {cohort} clients, {threshold} needed; failed rounds at"
        f" dropout {shown} ({TRIALS:,} drawn rounds each): {verdict}; a lower reconstruction_threshold or more"
        " num_shares tolerates more"
    )
