"""Epsilon spent by a run's rounds, from Google's dp-accounting library (the accountant pfl-research uses).

A round of central DP-FedAvg is one sampled Gaussian mechanism: the cohort is a sample of the population, each
client's update is clipped (sensitivity 1 in units of the clip) and the sum gets Gaussian noise of standard
deviation ``noise_multiplier`` clips. The run is that event composed once per round:

- a Poisson cohort (each client joins with probability q) is dp-accounting's ``PoissonSampledDpEvent``,
  accounted with privacy loss distributions (``pld``) or Renyi DP (``rdp``), add-or-remove-one neighbours;
- a fixed-size cohort is ``SampledWithoutReplacementDpEvent``, which dp-accounting accounts with Renyi DP over
  replace-one neighbours only.

Local DP has no sampling to amplify it (the server sees which clients sent what): a client's updates are a
Gaussian mechanism composed over the rounds it takes part in, reported for a client in every round.

The curve is cheap per round: the one-round RDP vector or PLD is built once and composed ``rounds`` times
(RDP adds up; a PLD self-composes by FFT) instead of composing the rounds again from scratch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution
from dp_accounting.rdp import rdp_privacy_accountant

from fedsim.config import ConfigError

# The least noise multiplier each accountant is asked about: a privacy loss distribution's support grows as
# 1 / z**2 (z = 0.1 took 12 s and 1.4 GB here, 0.3 under 2 s), and below these epsilon means nothing anyway.
LEAST_NOISE = {"rdp": 0.01, "pld": 0.3}
MOST_NOISE = 1000.0
CALIBRATION_TOLERANCE = 1e-4  # relative: calibrated noise within this of the one that spends the target exactly


@dataclass(frozen=True)
class Accounting:
    """What the accountant needs to know of a run; summary.json records it so anyone can recompute epsilon.

    ``sampling`` is ``poisson`` or ``fixed`` (ignored for ``local``), ``cohort`` the clients a round samples
    (expected, for Poisson; pfl's noise cohort when it is larger than the trained one) out of ``population``.
    """

    kind: str  # central | local
    accountant: str  # rdp | pld
    sampling: str  # poisson | fixed
    population: int
    cohort: int
    delta: float

    @property
    def sampling_rate(self) -> float:
        return self.cohort / self.population

    @property
    def replace_one(self) -> bool:
        """Whether neighbouring populations differ by one replaced client (a fixed-size central cohort smaller
        than the population: sampling without replacement) rather than one added or removed."""
        return self.sampling == "fixed" and self.kind == "central" and self.cohort < self.population

    def round_event(self, noise_multiplier: float) -> Any:
        """One round as a dp-accounting event."""
        gaussian = dp_accounting.GaussianDpEvent(noise_multiplier)
        if self.kind == "local" or self.cohort >= self.population:
            return gaussian
        if self.sampling == "poisson":
            return dp_accounting.PoissonSampledDpEvent(self.sampling_rate, gaussian)
        return dp_accounting.SampledWithoutReplacementDpEvent(self.population, self.cohort, gaussian)

    def fresh_accountant(self) -> dp_accounting.PrivacyAccountant:
        """A dp-accounting accountant of the neighbouring relation the sampling needs."""
        relation = dp_accounting.NeighboringRelation
        neighbours = relation.REPLACE_ONE if self.replace_one else relation.ADD_OR_REMOVE_ONE
        if self.accountant == "pld":
            return dp_accounting.pld.PLDAccountant(neighboring_relation=neighbours)
        return dp_accounting.rdp.RdpAccountant(neighboring_relation=neighbours)

    def epsilon(self, noise_multiplier: float, rounds: int) -> float:
        """Epsilon after ``rounds`` rounds, composed from scratch by dp-accounting (the reference the fast
        :class:`EpsilonCurve` is tested against); infinite without noise, 0 after no round."""
        if rounds == 0:
            return 0.0
        if noise_multiplier == 0:
            return math.inf
        accountant = self.fresh_accountant()
        accountant.compose(dp_accounting.SelfComposedDpEvent(self.round_event(noise_multiplier), rounds))
        return float(accountant.get_epsilon(self.delta))

    def calibrate(self, target_epsilon: float, rounds: int) -> float:
        """The smallest noise multiplier that keeps ``rounds`` rounds within ``target_epsilon``: dp-accounting's
        bracketed search between the accountant's least noise and 1000; a ConfigError when the target lies
        outside (it needs more noise than 1000, or less than the accountant's least)."""
        least = LEAST_NOISE[self.accountant]
        where = f"privacy.target_epsilon={target_epsilon} over {rounds} rounds at delta={self.delta}"
        if self.epsilon(MOST_NOISE, rounds) > target_epsilon:
            raise ConfigError(f"{where}: not reached even with noise_multiplier={MOST_NOISE:g}")
        if self.epsilon(least, rounds) <= target_epsilon:
            raise ConfigError(
                f"{where}: met with less noise than accountant={self.accountant} handles ({least}); give"
                " noise_multiplier instead" + (", or use accountant=rdp" if self.accountant == "pld" else "")
            )
        found = dp_accounting.calibrate_dp_mechanism(
            self.fresh_accountant,
            lambda z: dp_accounting.SelfComposedDpEvent(self.round_event(z), rounds),
            target_epsilon,
            self.delta,
            dp_accounting.ExplicitBracketInterval(least, MOST_NOISE),
            tol=CALIBRATION_TOLERANCE,
        )
        return float(found)


class EpsilonCurve:
    """Epsilon after each round for one noise multiplier: the one-round mechanism is accounted once."""

    def __init__(self, accounting: Accounting, noise_multiplier: float) -> None:
        self.accounting = accounting
        self.noise_multiplier = noise_multiplier
        self._spent: dict[int, float] = {}  # a round's epsilon is asked for by the budget, the row and the summary

    def __call__(self, rounds: int) -> float:
        if rounds not in self._spent:
            self._spent[rounds] = self._epsilon(rounds)
        return self._spent[rounds]

    def _epsilon(self, rounds: int) -> float:
        if rounds == 0:
            return 0.0
        if self.noise_multiplier == 0:
            return math.inf
        if self.accounting.accountant == "pld":
            return float(self._one_round_pld.self_compose(rounds).get_epsilon_for_delta(self.accounting.delta))
        orders, rdp = self._one_round_rdp
        epsilon, _ = rdp_privacy_accountant.compute_epsilon(orders, rdp * rounds, self.accounting.delta)
        return float(epsilon)

    @cached_property
    def _one_round_rdp(self) -> tuple[np.ndarray, np.ndarray]:
        """The RDP of one round at each order: the accountant's own numbers after composing one round."""
        accountant = self.accounting.fresh_accountant()
        accountant.compose(self.accounting.round_event(self.noise_multiplier))
        return np.asarray(accountant._orders), np.asarray(accountant._rdp)

    @cached_property
    def _one_round_pld(self) -> privacy_loss_distribution.PrivacyLossDistribution:
        rate = 1.0 if self.accounting.kind == "local" else min(1.0, self.accounting.sampling_rate)
        return privacy_loss_distribution.from_gaussian_mechanism(self.noise_multiplier, sampling_prob=rate)
