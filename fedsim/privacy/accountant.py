"""Epsilon spent by a run's rounds, from Google's dp-accounting library (the accountant pfl-research uses).

The accountant is told each release's neighbouring relation and sensitivity and composes the event its
mechanism gives for them (:mod:`fedsim.privacy.mechanism`; the Gaussian by default). A round of central
DP-FedAvg is one sampled Gaussian mechanism: the cohort is a sample of the population, each
client's update is clipped to L2 norm ``C`` and the sum gets Gaussian noise of standard deviation ``z * C``.
dp-accounting reads a noise multiplier as the noise's standard deviation over the L2 sensitivity *of the
neighbouring relation*, so every release states its relation and its sensitivity in units of ``C``, and the
accountant receives ``z / sensitivity``:

- a Poisson cohort (each client joins with probability q): add-or-remove-one neighbours (one client's data is
  in one population and not the other); the sum moves by at most ``C``, sensitivity 1. dp-accounting's
  ``PoissonSampledDpEvent``, accounted with privacy loss distributions (``pld``) or Renyi DP (``rdp``);
- a fixed-size cohort smaller than the population: sampling without replacement, which needs replace-one
  neighbours (the population's size is public); one client's clipped update can go from ``+C`` to ``-C``, so
  the sum moves by up to ``2C``, sensitivity 2. Under ``rdp``, dp-accounting's
  ``SampledWithoutReplacementDpEvent``. Under ``pld``, the dominating pair of Zhu, Dong and Wang (AISTATS 2022,
  sampling without replacement under replace-one): if ``(P, Q)`` dominates one release, ``(gP + (1-g)Q, Q)``
  dominates it sampled at rate ``g = cohort / population``. For the Gaussian, ``P`` is ``Q`` shifted by the
  sensitivity, 2 clips, so the pair is the one dp-accounting builds for a Poisson-sampled release at rate
  ``g`` under add-or-remove (both directions), and the accountant composes that event. The bound is tight:
  the concrete pair of populations where every client sends ``+C e`` and, in the neighbour, one sends
  ``-C e``, spends the same (tests/privacy/test_neighbours.py computes it from the pair's own densities);
  RDP's bound for sampling without replacement is 1.4-2x larger;
- a cohort that is the whole population: the Gaussian mechanism, add-or-remove-one, sensitivity 1;
- a release whose contributors the trace clock decides (a synchronous round on the trace, FedBuff's buffer):
  no amplification by sampling is claimed (``sampling: unsampled``). The schedule (who starts, arrives or drops,
  when) is a function of the trace, the seed and the clients' sample counts, all public, so it is the same for
  neighbouring datasets; a client contributes at most one clipped update to a release (FedBuff holds a client
  whose update waits in the buffer out of the clock's draws). Neighbours differ in one client's data, which
  moves each release it contributes to by at most ``C`` (zero-out: its updates replaced by zeros; the
  Gaussian's bound is add-or-remove's), sensitivity 1, and the releases are composed as unsampled Gaussians,
  the worst case of a client in every one;
- local DP: each client noises its own clipped update and the server sees which client sent it, so the
  mechanism must hide any two inputs of one client, which differ by up to ``2C``: sensitivity 2, a Gaussian
  mechanism composed over the rounds the client takes part in (reported for a client in every round).

Adaptive clipping also releases the noised count of clients left unclipped; its clients send centred bits
(``b - 1/2``), whose sensitivity is half the update's in the same units (1/2 add-or-remove, 1 replace-one),
so the pair of releases is one Gaussian mechanism of the combined multiplier (see :mod:`fedsim.privacy.clip`).

The curve is cheap per round: the one-round RDP vector or PLD is built once and composed ``rounds`` times
(RDP adds up; a PLD self-composes by FFT) instead of composing the rounds again from scratch. ``auto`` takes
``pld`` wherever its distribution can be built (:func:`chosen`), ``rdp`` below the least noise. dp-accounting's
RDP logs a warning for every order whose series does not converge (hundreds, for Poisson sampling at small z);
they are counted here and said once, in :attr:`EpsilonCurve.loose_orders`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

import dp_accounting
import numpy as np
from dp_accounting.pld import privacy_loss_distribution
from dp_accounting.rdp import rdp_privacy_accountant

from fedsim.config import ConfigError
from fedsim.privacy.mechanism import GAUSSIAN, PLD_STEP, Mechanism

# The least noise multiplier each accountant is asked about: a privacy loss distribution's support grows as
# 1 / z**2 (z = 0.1 took 12 s and 1.4 GB here, 0.3 under 2 s), and below these epsilon means nothing anyway.
LEAST_NOISE = {"rdp": 0.01, "pld": 0.3}
# Rounds of an unsampled Gaussian are accounted under pld as one Gaussian (Accounting.rounds_event), whose
# distribution is built at its noise over the composed shift: 0.05 takes under a second (epsilon ~300 there).
LEAST_COMPOSED_NOISE = 0.05
MOST_NOISE = 1000.0
CALIBRATION_TOLERANCE = 1e-4  # relative: calibrated noise within this of the one that spends the target exactly
ADD_OR_REMOVE, REPLACE_ONE, ZERO_OUT = "add-or-remove-one", "replace-one", "zero-out-one"
UNSAMPLED = "unsampled"  # the trace clock decides who contributes: no amplification by sampling
_T = TypeVar("_T")


class _CountUnconverged(logging.Filter):
    """Swallows dp-accounting's 'failed to converge' warnings (one per RDP order) and counts them."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if "failed to converge" in record.getMessage():
            self.count += 1
            return False
        return True


def quietly(compute: Callable[[], _T]) -> tuple[_T, int]:
    """``compute()`` with dp-accounting's convergence warnings caught; returns its value and how many orders
    were left out of the RDP bound (which makes it looser, never smaller than the truth)."""
    counter, logger = _CountUnconverged(), logging.getLogger("absl")
    logger.addFilter(counter)
    try:
        return compute(), counter.count
    finally:
        logger.removeFilter(counter)


@dataclass(frozen=True)
class Accounting:
    """What the accountant needs to know of one population's rounds; summary.json records it, so anyone can
    recompute epsilon as dp-accounting's event of ``GaussianDpEvent(noise_multiplier / sensitivity)``.

    ``sampling`` is ``poisson``, ``fixed`` or ``unsampled`` (ignored for ``local``), ``cohort`` the clients a
    round samples (expected, for Poisson) out of ``population`` (the whole population when unsampled).
    """

    kind: str  # central | local
    accountant: str  # rdp | pld
    sampling: str  # poisson | fixed | unsampled
    population: int
    cohort: int
    delta: float
    mechanism: Mechanism = GAUSSIAN  # what noises each release, and its event

    @property
    def sampling_rate(self) -> float:
        return self.cohort / self.population

    @property
    def neighbours(self) -> str:
        """The neighbouring relation: replace-one for a fixed-size central cohort smaller than the population
        (sampling without replacement keeps the population's size public) and for local DP (any two inputs of
        one client); zero-out-one where the trace decides who contributes (one client's updates replaced by
        zeros: the schedule stays, and each release moves as under add-or-remove); add-or-remove-one otherwise."""
        partial_fixed = self.sampling == "fixed" and self.cohort < self.population
        if self.kind == "local" or (self.kind == "central" and partial_fixed):
            return REPLACE_ONE
        return ZERO_OUT if self.sampling == UNSAMPLED else ADD_OR_REMOVE  # zero-out: add-or-remove's Gaussian bound

    @property
    def sensitivity(self) -> float:
        """The L2 sensitivity of a round's released sum in units of the clip: one client's update moves it by
        at most ``C`` when that client is added or removed, by up to ``2C`` when it is replaced."""
        return 2.0 if self.neighbours == REPLACE_ONE else 1.0

    def round_event(self, noise_multiplier: float) -> Any:
        """One round as a dp-accounting event: the mechanism's at noise over sensitivity, sampled as the cohort
        is."""
        release = self.mechanism.event(noise_multiplier / self.sensitivity)
        if self.kind == "local" or self.cohort >= self.population:
            return release
        if self.sampling == "poisson" or self.accountant == "pld":  # pld: the fixed cohort's dominating pair
            return dp_accounting.PoissonSampledDpEvent(self.sampling_rate, release)
        return dp_accounting.SampledWithoutReplacementDpEvent(self.population, self.cohort, release)

    def fresh_accountant(self) -> dp_accounting.PrivacyAccountant:
        """A dp-accounting accountant of the relation the event needs. Only sampling without replacement is
        composed under dp-accounting's replace-one (whose event takes noise over sensitivity as given); a plain
        Gaussian has its sensitivity divided into the noise already, so it is composed under add-or-remove,
        where dp-accounting's PLD would otherwise double it a second time."""
        relation = dp_accounting.NeighboringRelation
        replace = self.kind == "central" and self.neighbours == REPLACE_ONE and self.accountant == "rdp"
        neighbours = relation.REPLACE_ONE if replace else relation.ADD_OR_REMOVE_ONE
        if self.accountant == "pld":
            return dp_accounting.pld.PLDAccountant(neighbours, value_discretization_interval=PLD_STEP)
        return dp_accounting.rdp.RdpAccountant(neighboring_relation=neighbours)

    def epsilon(self, noise_multiplier: float, rounds: int) -> float:
        """Epsilon after ``rounds`` rounds, composed from scratch by dp-accounting (the reference the fast
        :class:`EpsilonCurve` is tested against); infinite without noise, 0 after no round."""
        if rounds == 0:
            return 0.0
        if noise_multiplier == 0:
            return math.inf
        accountant = self.fresh_accountant()
        accountant.compose(self.rounds_event(noise_multiplier, rounds))
        return float(accountant.get_epsilon(self.delta))

    def epsilon_released(self, noise_multiplier: float, releases: Mapping[int, int]) -> float:
        """Epsilon where round indices were released more than once (``releases``: how many times -> how many
        round indices), composed from scratch: m releases of one round, each noised independently at
        ``noise_multiplier`` from the same cohort, are dominated by one release of that cohort at
        ``noise_multiplier / sqrt(m)`` (m Gaussian queries of the same data compose to one of sqrt(m) times the
        sensitivity, Dong, Roth and Su's mu-GDP, and the cohort is sampled once for all of them)."""
        if not any(releases.values()):
            return 0.0
        if noise_multiplier == 0:
            return math.inf
        accountant = self.fresh_accountant()
        for times, rounds in sorted(releases.items()):
            if rounds:
                accountant.compose(self.rounds_event(noise_multiplier / math.sqrt(times), rounds))
        return float(accountant.get_epsilon(self.delta))

    @property
    def unsampled_gaussian(self) -> bool:
        """Whether a round is one Gaussian release, not sampled (local DP, a cohort of the whole population)."""
        return isinstance(self.round_event(1.0), dp_accounting.GaussianDpEvent)

    def least_noise(self, rounds: int) -> float:
        """The least noise multiplier this accountant is asked about over ``rounds`` rounds."""
        least = LEAST_NOISE[self.accountant]
        if self.accountant == "pld" and self.unsampled_gaussian:  # one Gaussian of sqrt(rounds) times the shift
            least = max(least, LEAST_COMPOSED_NOISE * self.sensitivity * math.sqrt(rounds))
        return least

    def rounds_event(self, noise_multiplier: float, rounds: int) -> Any:
        """``rounds`` rounds as one dp-accounting event. Under ``pld``, rounds of an unsampled Gaussian release
        (local DP, a cohort of the whole population) are the one Gaussian of ``sqrt(rounds)`` times the shift:
        Gaussians compose exactly so (Dong, Roth and Su's mu-GDP), and one distribution is built, not a
        thousand composed."""
        event = self.round_event(noise_multiplier)
        if self.accountant == "pld" and isinstance(event, dp_accounting.GaussianDpEvent):
            return dp_accounting.GaussianDpEvent(event.noise_multiplier / math.sqrt(rounds))
        return dp_accounting.SelfComposedDpEvent(event, rounds)

    def calibrate(self, target_epsilon: float, rounds: int) -> float:
        """The smallest noise multiplier that keeps ``rounds`` rounds within ``target_epsilon``: dp-accounting's
        bracketed search between the accountant's least noise and 1000; a ConfigError when the target lies
        outside (it needs more noise than 1000, or less than the accountant's least)."""
        least = self.least_noise(rounds)
        where = f"privacy.target_epsilon={target_epsilon} over {rounds} rounds at delta={self.delta}"
        if self.epsilon(MOST_NOISE, rounds) > target_epsilon:
            raise ConfigError(f"{where}: not reached even with noise_multiplier={MOST_NOISE:g}")
        if self.epsilon(least, rounds) <= target_epsilon:
            raise ConfigError(
                f"{where}: met with less noise than accountant={self.accountant} handles ({least:.3g}); give"
                " noise_multiplier instead" + (", or use accountant=rdp" if self.accountant == "pld" else "")
            )
        found = dp_accounting.calibrate_dp_mechanism(
            self.fresh_accountant,
            lambda z: self.rounds_event(z, rounds),
            target_epsilon,
            self.delta,
            dp_accounting.ExplicitBracketInterval(least, MOST_NOISE),
            tol=CALIBRATION_TOLERANCE,
        )
        return float(found)

    def calibrate_quietly(self, target_epsilon: float, rounds: int) -> tuple[float, int]:
        """:meth:`calibrate`, with the RDP orders it left out of a bound counted instead of logged."""
        return quietly(lambda: self.calibrate(target_epsilon, rounds))


def chosen(setting: str, accounting: Accounting, noise_multiplier: float | None, rounds: int) -> str:
    """The accountant ``privacy.accountant`` names for this release at this noise (None: not known yet, being
    calibrated): ``auto`` is ``pld`` where a privacy loss distribution can be built (no noise, or
    :data:`LEAST_NOISE` and up, and an event the PLD accountant composes), else ``rdp``."""
    if setting != "auto":
        return setting
    probe = dataclasses.replace(accounting, accountant="pld")
    if noise_multiplier is not None and 0 < noise_multiplier < probe.least_noise(rounds):
        return "rdp"
    return "pld" if probe.fresh_accountant().supports(probe.round_event(1.0)) else "rdp"


class EpsilonCurve:
    """Epsilon after each round for one noise multiplier: the one-round mechanism is accounted once."""

    def __init__(self, accounting: Accounting, noise_multiplier: float) -> None:
        self.accounting = accounting
        self.noise_multiplier = noise_multiplier
        self._spent: dict[int, float] = {}  # a round's epsilon is asked for by the budget, the row and the summary
        # round index -> how many times it was released before this run's timeline (a resume that trained it
        # again with fresh noise): those rounds count as often as they were released
        self.released_before: dict[int, int] = {}
        self._released: dict[tuple[int, tuple[tuple[int, int], ...]], float] = {}

    def __call__(self, rounds: int) -> float:
        if self.released_before:  # composed from scratch, once per round and record of releases
            key = (rounds, tuple(sorted(self.released_before.items())))
            if key not in self._released:
                self._released[key] = self.accounting.epsilon_released(self.noise_multiplier, self.releases(rounds))
            return self._released[key]
        if rounds not in self._spent:
            self._spent[rounds] = self._epsilon(rounds)
        return self._spent[rounds]

    def releases(self, rounds: int) -> dict[int, int]:
        """After ``rounds`` rounds of this timeline: how many times -> how many round indices were released (a
        round released before and not trained again yet still counts its earlier releases)."""
        counts: dict[int, int] = {}
        before = self.released_before
        for index in range(max(rounds, max(before, default=-1) + 1)):
            times = before.get(index, 0) + (index < rounds)
            counts[times] = counts.get(times, 0) + 1
        counts.pop(0, None)
        return counts

    def _epsilon(self, rounds: int) -> float:
        if rounds == 0:
            return 0.0
        if self.noise_multiplier == 0:
            return math.inf
        if self.accounting.accountant == "pld":
            if self._one_round_pld is None or self.accounting.unsampled_gaussian:  # as events, or one Gaussian
                return self.accounting.epsilon(self.noise_multiplier, rounds)
            return float(self._one_round_pld.self_compose(rounds).get_epsilon_for_delta(self.accounting.delta))
        orders, rdp, _ = self._one_round_rdp
        epsilon, _ = rdp_privacy_accountant.compute_epsilon(orders, rdp * rounds, self.accounting.delta)
        return float(epsilon)

    @property
    def loose_orders(self) -> int:
        """RDP orders dp-accounting left out of this curve (their series did not converge): a looser bound."""
        if self.accounting.accountant != "rdp" or self.noise_multiplier == 0:
            return 0
        return self._one_round_rdp[2]

    @cached_property
    def _one_round_rdp(self) -> tuple[np.ndarray, np.ndarray, int]:
        """The RDP of one round at each order (the accountant's own numbers after composing one round), and the
        orders it left out."""
        accountant = self.accounting.fresh_accountant()
        _, loose = quietly(lambda: accountant.compose(self.accounting.round_event(self.noise_multiplier)))
        return np.asarray(accountant._orders), np.asarray(accountant._rdp), loose

    @cached_property
    def _one_round_pld(self) -> privacy_loss_distribution.PrivacyLossDistribution | None:
        a = self.accounting
        rate = 1.0 if a.kind == "local" else min(1.0, a.sampling_rate)  # fixed or Poisson: the same pair
        pld: privacy_loss_distribution.PrivacyLossDistribution | None = a.mechanism.pld(
            self.noise_multiplier / a.sensitivity, rate
        )
        return pld
