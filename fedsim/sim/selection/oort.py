"""Oort's training selector (Lai, Zhu, Madhyastha and Chowdhury, "Oort: Efficient Federated Learning via Guided
Participant Selection", OSDI 2021, section 4 and Algorithm 1), on fedsim's reports and trace.

Every round (``R`` = the round, 1-based):

- each client heard from has a statistical utility ``n_i * loss_i`` (its samples times the mean training loss
  it last reported: the paper's ``|B_i| sqrt(mean loss^2)`` with the mean loss fedsim records for the root
  mean square), clipped at the ``clip_bound`` quantile and scaled to [0, 1], plus the staleness bonus
  ``sqrt(0.1 ln R / L_i)`` (``L_i``: the 1-based round it last trained); a client whose task takes ``t_i``
  longer than the preferred round duration ``T`` has it multiplied by ``(T / t_i) ** round_penalty``;
- ``T`` is the ``round_threshold`` percentile of the population's task durations; the pacer compares the
  exploited clients' utility over the last ``pacer_step`` rounds with the ``pacer_step`` before: nearly flat
  (within 10%) relaxes ``T`` by ``pacer_delta`` percentiles, a sharp change (5x) tightens it;
- ``epsilon = max(exploration * exploration_decay ** R, exploration_min)`` of the cohort explores clients not
  heard from yet, drawn with probability proportional to their samples (times the same speed penalty) among
  the ``sample_window`` x as many best of them; the rest exploits: drawn with probability proportional to
  utility among the clients above ``cut_off_util`` times the K-th highest utility (at least 10 x as many
  as it needs, when there are).

Departures from FedScale's implementation, each said: the cohort is always ``clients_per_round`` (when too
few clients are left to explore, exploitation takes the rest, and the other way round); only clients reachable
this round are chosen (``emulation.availability``, or on the trace clock those online at the round's start,
where the cohort is ``clients_per_round + over_select``, FedScale's over-commitment); and the draws use a
stream keyed by the seed and the round, so every rank and a resumed run choose the same cohort.
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


def utilities(
    reward: np.ndarray, last: np.ndarray, duration: np.ndarray, r1: int, preferred: float, cfg: OortSelection
) -> np.ndarray:
    """Oort's utility of explored clients in 1-based round ``r1``: statistical utility ``reward`` clipped at its
    ``clip_bound`` quantile and scaled by the minimum (times 0.999) and the range, plus ``sqrt(0.1 ln r1 /
    last)``, times ``(preferred / duration) ** round_penalty`` where slower than ``preferred``."""
    ordered = np.sort(reward)
    clip = ordered[min(int(len(ordered) * cfg.clip_bound), len(ordered) - 1)]
    low = ordered[0] * 0.999
    spread = max(ordered[-1] - low, 1e-4)
    score = (np.minimum(reward, clip) - low) / spread + np.sqrt(0.1 * math.log(r1) / last)
    slow = duration > preferred
    score[slow] *= (preferred / np.maximum(duration[slow], 1e-4)) ** cfg.round_penalty
    return np.abs(score)


def weighted_draw(rng: np.random.Generator, pool: np.ndarray, weight: np.ndarray, k: int) -> list[int]:
    """``k`` of ``pool`` without replacement, each draw with probability proportional to ``weight`` (equal where
    every weight is 0)."""
    if k <= 0:
        return []
    p = weight + 1e-12 * max(float(weight.max()), 1.0)  # every client keeps a chance: k never exceeds the draw
    return [int(c) for c in rng.choice(pool, size=k, replace=False, p=p / p.sum())]


@register_selector(OortSelection)
class Oort:
    def __init__(self, cfg: OortSelection, context: SelectionContext) -> None:
        self.cfg, self.context = cfg, context
        self.reports = ClientReports()
        self.threshold = cfg.round_threshold  # the pacer's percentile of durations: T
        self.history: list[float] = []  # the exploited clients' mean utility, round by round
        self.exploited: list[int] = []  # last round's
        self._durations: np.ndarray | None = None
        self._samples: np.ndarray | None = None

    def _population(self) -> tuple[np.ndarray, np.ndarray]:
        """Every client's task seconds and samples, asked once."""
        if self._durations is None or self._samples is None:
            c = self.context
            assert c.duration is not None and c.samples is not None, "Oort is built with durations and samples"
            self._durations = np.array([c.duration(cid) for cid in range(c.population)], dtype=np.float64)
            self._samples = np.array([c.samples(cid) for cid in range(c.population)], dtype=np.float64)
        return self._durations, self._samples

    def preferred(self) -> float:
        """T: the ``threshold`` percentile of the population's task durations (no limit at 100)."""
        durations, _ = self._population()
        if self.threshold >= 100:
            return math.inf
        ordered = np.sort(durations)
        return float(ordered[min(int(len(ordered) * self.threshold / 100), len(ordered) - 1)])

    def _pace(self, r1: int) -> None:
        step = self.cfg.pacer_step
        if r1 < 2 * step or r1 % step or len(self.history) < 2 * step:
            return
        before, now = sum(self.history[-2 * step : -step]), sum(self.history[-step:])
        if abs(now - before) <= 0.1 * before:  # utility has flattened: admit slower clients
            self.threshold = min(100.0, self.threshold + self.cfg.pacer_delta)
        elif abs(now - before) >= 5 * before:
            self.threshold = max(self.cfg.pacer_delta, self.threshold - self.cfg.pacer_delta)

    def select(self, r: int) -> list[int]:
        c, cfg, r1 = self.context, self.cfg, r + 1
        self._pace(r1)
        durations, samples = self._population()
        preferred = self.preferred()
        everyone = np.arange(c.population)
        online = everyone[reachable(c.seed, r, everyone, c.availability)] if c.availability < 1 else everyone
        if c.online is not None:  # the trace clock's: only clients online at the round's start can be started
            online = np.intersect1d(online, c.online(), assume_unique=True)
        heard = np.isin(online, np.fromiter(self.reports.rounds, dtype=np.int64, count=len(self.reports.rounds)))
        explored, unexplored = online[heard], online[~heard]
        epsilon = max(cfg.exploration * cfg.exploration_decay**r1, cfg.exploration_min)
        k = min(c.cohort, len(online))
        explore = min(len(unexplored), int(k * epsilon))
        exploit = min(len(explored), k - explore)
        explore = min(len(unexplored), k - exploit)  # too few heard from: exploration takes the rest
        rng = np.random.default_rng([c.seed, r, _DRAWS])
        self.exploited = self._exploit(rng, explored, exploit, r1, preferred, durations, samples)
        chosen = self.exploited + self._explore(rng, unexplored, explore, preferred, durations, samples)
        return sorted(chosen)

    def _exploit(
        self, rng: np.random.Generator, explored: np.ndarray, k: int, r1: int, preferred: float,
        durations: np.ndarray, samples: np.ndarray,
    ) -> list[int]:  # fmt: skip
        if k == 0:
            return []
        loss = np.nan_to_num(self.reports.losses(explored.tolist()), nan=0.0, posinf=0.0)
        last = np.array([self.reports.last[cid] + 1 for cid in explored.tolist()], dtype=np.float64)
        score = utilities(samples[explored] * loss, last, durations[explored], r1, preferred, self.cfg)
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
        heard = [cid for cid in self.exploited if cid in reported]
        utility = sum(samples[cid] * self.reports.loss[cid] for cid in heard if math.isfinite(self.reports.loss[cid]))
        self.history.append(utility / (len(heard) + 1e-4))

    def state_dict(self) -> dict[str, Any]:
        return {"threshold": self.threshold, "history": self.history, "exploited": self.exploited}

    def tensors(self) -> dict[str, Tensor]:
        return self.reports.tensors()

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.reports.load(tensors)
        self.threshold = float(state.get("threshold", self.cfg.round_threshold))
        self.history = [float(u) for u in state.get("history", [])]
        self.exploited = [int(c) for c in state.get("exploited", [])]
