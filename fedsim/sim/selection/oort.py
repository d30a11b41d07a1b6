"""Oort's training selector (Lai, Zhu, Madhyastha and Chowdhury, "Oort: Efficient Federated Learning via Guided
Participant Selection", OSDI 2021, section 4 and Algorithm 1), on fedsim's reports and trace, after the
authors' code: ``_training_selector.getTopK`` in FedScale's thirdparty/oort/oort.py (SymbioticLab/FedScale at
7ec441c), the newer of the two, and in the artifact's oort/oort.py (SymbioticLab/Oort at 05a3aa1).

Round ``r`` (0-based) is the selector's ``R = r + 1``-th call. Each call, in getTopK's order:

- the blacklist (``blacklist_rounds``, off by default as in both references; the artifact turns it on, at 50,
  only for its outlier experiment, training/README.md): the clients that trained more than ``blacklist_rounds``
  rounds, most-trained first, at most ``blacklist_max_len`` of the population, are neither exploited nor
  counted in the normalisation;
- the pacer: the exploited clients' mean utility is recorded once a call (the first, with nothing exploited
  yet, records 0); from ``R = 2W`` on, every ``W = pacer_step`` calls it compares the sum over the last ``W``
  with the ``W`` before: within 10% relaxes the percentile of ``T`` by ``pacer_delta``, a change of 5x or more
  tightens it. ``T``, the preferred round duration, is that percentile of the population's task durations;
- each feasible client (reachable, not blacklisted) has a reward: its samples times the mean training loss it
  last reported (the paper's ``|B_i| sqrt(mean loss^2)``; fedsim records the mean loss), or, never heard from,
  its samples (the reference's initial reward ``min(size, local_steps * batch_size)``, the samples a task
  trains, where fedsim's utility counts all the client's samples). The positive rewards of every feasible
  arm, explored or not, set the normalisation: clipped at their ``clip_bound`` quantile, less 0.999 times the
  least, over the range. An explored client's utility is that plus ``sqrt(0.1 ln R / L_i)`` (``L_i``: the
  1-based round it last trained), times ``(T / t_i) ** round_penalty`` where its task ``t_i`` is slower than
  ``T``, absolute (FedScale's ``abs``);
- ``epsilon = max(epsilon * exploration_decay, exploration_min)`` from ``exploration``, once a call;
  ``int(K epsilon)`` explore and ``K - int(K epsilon)`` exploit (FedScale's rounding; the artifact's exploits
  ``int(K (1 - epsilon))``). Exploitation draws, with probability proportional to utility, from the clients at
  or above ``cut_off_util`` times the utility ranked just past the exploited count, and at least 10 times that
  count plus one of the best where there are (FedScale's; the artifact keeps only those above the cut-off). Exploration
  draws, proportionally to the reward times the same speed penalty, from the ``sample_window`` x as many best
  clients never heard from.

Where the two references differ otherwise: the artifact does not take the absolute utility, and once no client
is left unexplored it sets epsilon to 0 for good and fills a short cohort at random; fedsim follows FedScale
(but for FedScale's cohort then repeating the last round's explored clients, as it does not reset them).

fedsim's departures, each to keep the run's contract: the cohort is always ``clients_per_round`` (when too few
clients are left to explore, exploitation takes the rest, where FedScale's cohort comes out short; fewer only
when fewer clients are reachable and not blacklisted); only clients reachable this round are chosen
(``emulation.availability``, or on the trace clock those online at the round's start, where the cohort is
``clients_per_round + over_select``, FedScale's over-commitment); the draws use a stream keyed by the seed and
the round, not numpy's global generator, so every rank and a resumed run choose the same cohort; the first
round is Oort's own pure exploration (FedScale's client manager draws it at random, as getTopK needs a client
heard from); a client chosen that did not report stays unexplored (FedScale's aggregator credits a straggler
the round's mean utility); ``L_i`` counts rounds from fedsim's first (FedScale's time stamps come from its
aggregator's round, one ahead of getTopK's calls after its random first round); and the blacklist's cap is
``int(blacklist_max_len * population)`` (the references slice by the float product, which raises). Blacklist
counts are the rounds each client reported (:class:`ClientReports`, in the checkpoint's tensors); the pacer's
percentile and history are in its state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torch import Tensor

from fedsim.config import register_selector
from fedsim.config.selection import OortSelection
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.rounds.cohort import reachable
from fedsim.sim.selection.base import ClientReports, SelectionContext

_DRAWS = 0x6F6F7274  # the key of the stream of Oort's draws


def normaliser(rewards: np.ndarray, clip_bound: float) -> tuple[float, float, float]:
    """``(clip, low, spread)`` of the feasible arms' positive rewards (samples x loss): the ``clip_bound``
    quantile, 0.999 times the least, and the range above it (at least 1e-4), as FedScale's ``get_norm``."""
    positive = np.sort(rewards[rewards > 0])
    if len(positive) == 0:  # the references never meet it: their first call follows a round of reports
        return 0.0, 0.0, 1e-4
    clip = float(positive[min(int(len(positive) * clip_bound), len(positive) - 1)])
    low = float(positive[0]) * 0.999
    return clip, low, max(float(positive[-1]) - low, 1e-4)


def utilities(
    reward: np.ndarray,
    last: np.ndarray,
    duration: np.ndarray,
    r1: int,
    preferred: float,
    norm: tuple[float, float, float],
    round_penalty: float,
) -> np.ndarray:
    """Oort's utility of explored clients in call ``r1``: the statistical utility ``reward`` clipped and scaled
    by ``norm`` (:func:`normaliser` over every feasible arm), plus ``sqrt(0.1 ln r1 / last)``, times
    ``(preferred / duration) ** round_penalty`` where slower than ``preferred`` (seconds); absolute."""
    clip, low, spread = norm
    score = (np.minimum(reward, clip) - low) / spread + np.sqrt(0.1 * math.log(r1) / last)
    slow = duration > preferred
    score[slow] *= (preferred / np.maximum(duration[slow], 1e-4)) ** round_penalty
    return np.abs(score)


def blacklist(rounds: Mapping[int, int], population: int, cfg: OortSelection) -> np.ndarray:
    """The clients that trained more than ``blacklist_rounds`` rounds, most-trained first (ties by id), at most
    ``int(blacklist_max_len * population)`` of them (FedScale's ``get_blacklist``); none when it is off."""
    if cfg.blacklist_rounds is None:
        return np.zeros(0, dtype=np.int64)
    over = sorted((c for c, n in rounds.items() if n > cfg.blacklist_rounds), key=lambda c: (-rounds[c], c))
    return np.array(over[: int(cfg.blacklist_max_len * population)], dtype=np.int64)


def weighted_draw(rng: np.random.Generator, pool: np.ndarray, weight: np.ndarray, k: int) -> list[int]:
    """``k`` of ``pool`` without replacement, each draw with probability proportional to ``weight``; where
    fewer than ``k`` weights are positive (the references would raise), every client keeps a tiny chance."""
    if k <= 0:
        return []
    if np.count_nonzero(weight > 0) < k:
        weight = weight + 1e-12 * max(float(weight.max()), 1.0)
    total = float(sum(weight.tolist()))  # summed in order, as the references' Python sum: the same p to the bit
    return [int(c) for c in rng.choice(pool, size=k, replace=False, p=weight / total)]


@register_selector(OortSelection)
class Oort:
    def __init__(self, cfg: OortSelection, context: SelectionContext) -> None:
        self.cfg, self.context = cfg, context
        self.reports = ClientReports()
        self.threshold = cfg.round_threshold  # the pacer's percentile of durations: T
        self.history: list[float] = []  # round r's exploited clients' mean utility at index r (0: not heard)
        self.exploited: list[int] = []  # last round's
        self._durations: np.ndarray | None = None
        self._samples: np.ndarray | None = None
        self._epsilon = (0, cfg.exploration)  # (call, epsilon after it): the decay is iterated, not a power

    def _population(self) -> tuple[np.ndarray, np.ndarray]:
        """Every client's task seconds and samples, asked once."""
        if self._durations is None or self._samples is None:
            c = self.context
            assert c.duration is not None and c.samples is not None, "Oort is built with durations and samples"
            self._durations = np.array([c.duration(cid) for cid in range(c.population)], dtype=np.float64)
            self._samples = np.array([c.samples(cid) for cid in range(c.population)], dtype=np.float64)
        return self._durations, self._samples

    def preferred(self) -> float:
        """T in seconds: the ``threshold`` percentile of the population's task durations (no limit at 100)."""
        durations, _ = self._population()
        if self.threshold >= 100:
            return math.inf
        ordered = np.sort(durations)
        return float(ordered[min(int(len(ordered) * self.threshold / 100), len(ordered) - 1)])

    def epsilon(self, r1: int) -> float:
        """The share explored in call ``r1``: ``exploration`` decayed once a call, floored, multiplied out call
        by call as the reference does (so ``int(K epsilon)`` rounds as its floats do)."""
        at, eps = self._epsilon if self._epsilon[0] <= r1 else (0, self.cfg.exploration)
        for _ in range(at, r1):
            eps = max(eps * self.cfg.exploration_decay, self.cfg.exploration_min)
        self._epsilon = (r1, eps)
        return eps

    def _pace(self, r1: int) -> None:
        """The pacer at call ``r1``: the exploited utility of each call, the first's 0 (nothing exploited before
        it), call ``n``'s that of round ``n - 2``'s exploited clients (0 where none reported)."""
        step = self.cfg.pacer_step
        if r1 < 2 * step or r1 % step:
            return
        utility = [0.0, *self.history[: r1 - 1]]
        utility += [0.0] * (r1 - len(utility))
        before, now = sum(utility[-2 * step : -step]), sum(utility[-step:])
        if abs(now - before) <= 0.1 * before:  # utility has flattened: admit slower clients
            self.threshold = min(100.0, self.threshold + self.cfg.pacer_delta)
        elif abs(now - before) >= 5 * before:
            self.threshold = max(self.cfg.pacer_delta, self.threshold - self.cfg.pacer_delta)

    def select(self, r: int) -> list[int]:
        c, cfg, r1 = self.context, self.cfg, r + 1
        durations, samples = self._population()
        banned = blacklist(self.reports.rounds, c.population, cfg)  # before the pacer, as getTopK
        self._pace(r1)
        preferred = self.preferred()
        everyone = np.arange(c.population)
        online = everyone[reachable(c.seed, r, everyone, c.availability)] if c.availability < 1 else everyone
        if c.online is not None:  # the trace clock's: only clients online at the round's start can be started
            online = np.intersect1d(online, c.online(), assume_unique=True)
        online = online[~np.isin(online, banned)]
        heard = np.isin(online, np.fromiter(self.reports.rounds, dtype=np.int64, count=len(self.reports.rounds)))
        explored, unexplored = online[heard], online[~heard]
        loss = np.nan_to_num(self.reports.losses(explored.tolist()), nan=0.0, posinf=0.0, neginf=0.0)
        reward = samples.copy()  # the unexplored's: their samples
        reward[explored] = samples[explored] * loss
        norm = normaliser(reward[online], cfg.clip_bound)
        epsilon = self.epsilon(r1)
        k = min(c.cohort, len(online))
        explore = min(len(unexplored), int(k * epsilon))
        exploit = min(len(explored), k - explore)
        explore = min(len(unexplored), k - exploit)  # too few heard from: exploration takes the rest
        rng = np.random.default_rng([c.seed, r, _DRAWS])
        last = np.array([self.reports.last[cid] + 1 for cid in explored.tolist()], dtype=np.float64)
        score = utilities(reward[explored], last, durations[explored], r1, preferred, norm, cfg.round_penalty)
        self.exploited = self._exploit(rng, explored, score, exploit)
        chosen = self.exploited + self._explore(rng, unexplored, explore, preferred, durations, samples)
        return sorted(chosen)

    def _exploit(self, rng: np.random.Generator, explored: np.ndarray, score: np.ndarray, k: int) -> list[int]:
        if k == 0:
            return []
        order = np.lexsort((explored, -score))  # highest first, ties by id
        cut = score[order[min(k, len(order) - 1)]] * self.cfg.cut_off_util
        admitted = max(int(np.count_nonzero(score >= cut)), min(len(order), 10 * k + 1))
        pool = order[:admitted]
        return weighted_draw(rng, explored[pool], score[pool], k)

    def _explore(
        self, rng: np.random.Generator, unexplored: np.ndarray, k: int, preferred: float,
        durations: np.ndarray, samples: np.ndarray,
    ) -> list[int]:  # fmt: skip
        if k == 0:
            return []
        reward = samples[unexplored].copy()
        slow = durations[unexplored] > preferred
        reward[slow] *= (preferred / np.maximum(durations[unexplored][slow], 1e-4)) ** self.cfg.round_penalty
        order = np.lexsort((unexplored, -reward))[: min(int(self.cfg.sample_window * k), len(unexplored))]
        return weighted_draw(rng, unexplored[order], reward[order], k)

    def observe(self, r: int, records: Sequence[ClientRecord]) -> None:
        self.reports.observe(r, records)
        _, samples = self._population()
        reported = {rec.cid for rec in records}
        heard, utility = 1e-4, 0.0  # summed in the draw's order, as FedScale's calculateSumUtil
        for cid in self.exploited:
            if cid in reported:
                heard += 1
                loss = self.reports.loss[cid]
                utility += float(samples[cid] * loss) if math.isfinite(loss) else 0.0
        self.history = [*self.history[:r], *[0.0] * (r - len(self.history)), utility / heard]

    def state_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "history": self.history, "exploited": self.exploited}

    def tensors(self) -> dict[str, Tensor]:
        return self.reports.tensors()

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.reports.load(tensors)
        self.threshold = float(state.get("threshold", self.cfg.round_threshold))
        self.history = [float(u) for u in state.get("history", [])]
        self.exploited = [int(c) for c in state.get("exploited", [])]
