"""Oort's training selector ported from the authors' code, to test fedsim's against: class
``_training_selector`` of FedScale's thirdparty/oort/oort.py (SymbioticLab/FedScale at commit 7ec441c),
methods ``register_client``, ``update_client_util``, ``calculateSumUtil``, ``pacer``, ``get_blacklist``,
``getTopK`` and ``get_norm``, written again method by method from that file (not from fedsim's code).

What the port changes, each marked where it happens:

- the draws: the reference calls ``numpy.random.choice`` on numpy's global generator; the port calls
  ``choice`` on a generator it is handed, so a test can hand it the one fedsim draws from and compare cohorts
  draw for draw;
- the unexplored clients are visited in id order (the reference iterates a Python set of ids, which for small
  ints is id order too);
- two states the reference never meets in FedScale's flow and would raise on are guarded: no client heard
  from yet (its client manager draws the first round at random), and as many clients to exploit as there are
  explored ones (its ``sortedClientUtil[exploitLen]`` would be past the end);
- the blacklist's cap is ``int(blacklist_max_len * arms)`` (the reference slices by the float, which raises);
- when no client is left to explore, the reference's cohort would repeat the previous round's explored
  clients (``exploreClients`` is not reset); the port resets it. The tests never reach that state.

Where the artifact's copy (SymbioticLab/Oort at 05a3aa1, oort/oort.py) differs: it exploits ``int(K (1 -
epsilon))``, keeps only the clients at or above the cut-off (no ``10 K`` pool), takes no absolute value of the
utility, and zeroes epsilon and fills a short cohort at random once nobody is left to explore.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Args:
    """The arguments ``_training_selector`` reads (FedScale's fedscale/cloud/config_parser.py names)."""

    exploration_factor: float = 0.9
    exploration_decay: float = 0.98
    exploration_min: float = 0.3
    round_threshold: float = 30.0
    round_penalty: float = 2.0
    cut_off_util: float = 0.05
    clip_bound: float = 0.9
    pacer_step: int = 20
    pacer_delta: float = 5.0
    sample_window: float = 5.0
    blacklist_rounds: int = -1
    blacklist_max_len: float = 0.3


@dataclass
class Arm:
    reward: float
    duration: float
    time_stamp: int = 0
    count: int = 0


@dataclass
class ReferenceOort:
    args: Args
    arms: dict[int, Arm] = field(default_factory=dict)  # insertion order: the reference's OrderedDict
    training_round: int = 0
    unexplored: set[int] = field(default_factory=set)
    successful: set[int] = field(default_factory=set)
    exploit_history: list[float] = field(default_factory=list)
    exploit_clients: list[int] = field(default_factory=list)
    explore_clients: list[int] = field(default_factory=list)
    blacklist: set[int] = field(default_factory=set)
    exploration: float = 0.0
    round_threshold: float = 0.0
    round_prefer_duration: float = math.inf

    def __post_init__(self) -> None:
        self.exploration = self.args.exploration_factor
        self.round_threshold = self.args.round_threshold

    def register_client(self, cid: int, reward: float, duration: float) -> None:
        if cid not in self.arms:
            self.arms[cid] = Arm(reward, duration, self.training_round, 0)
            self.unexplored.add(cid)

    def update_client_util(self, cid: int, reward: float, duration: float, time_stamp: int) -> None:
        arm = self.arms[cid]
        arm.reward, arm.duration, arm.time_stamp = reward, duration, time_stamp
        arm.count += 1
        self.unexplored.discard(cid)
        self.successful.add(cid)

    def calculate_sum_util(self, clients: list[int]) -> float:
        cnt, util = 1e-4, 0.0
        for cid in clients:
            if cid in self.successful:
                cnt += 1
                util += self.arms[cid].reward
        return util / cnt

    def pacer(self) -> None:
        self.exploit_history.append(self.calculate_sum_util(self.exploit_clients))
        self.successful = set()
        step = self.args.pacer_step
        if self.training_round >= 2 * step and self.training_round % step == 0:
            last = sum(self.exploit_history[-2 * step : -step])
            current = sum(self.exploit_history[-step:])
            if abs(current - last) <= last * 0.1:
                self.round_threshold = min(100.0, self.round_threshold + self.args.pacer_delta)
            elif abs(current - last) >= last * 5:
                self.round_threshold = max(self.args.pacer_delta, self.round_threshold - self.args.pacer_delta)

    def get_blacklist(self) -> set[int]:
        out: list[int] = []
        if self.args.blacklist_rounds != -1:
            for cid in sorted(self.arms, reverse=True, key=lambda c: self.arms[c].count):
                if self.arms[cid].count > self.args.blacklist_rounds:
                    out.append(cid)
                else:
                    break
            cap = int(self.args.blacklist_max_len * len(self.arms))  # port: the reference slices by the float
            out = out[:cap]
        return set(out)

    @staticmethod
    def get_norm(values: list[float], clip_bound: float = 0.95, thres: float = 1e-4) -> tuple[float, float, float]:
        """(min, range, clip) of ``values``; the reference's max and mean are read by its logs only."""
        values.sort()
        clip = values[min(int(len(values) * clip_bound), len(values) - 1)]
        low = values[0] * 0.999
        return float(low), float(max(values[-1] - low, thres)), float(clip)

    def get_top_k(self, num: int, cur_time: int, feasible: set[int], rng: np.random.Generator) -> list[int]:
        self.training_round = cur_time
        self.blacklist = self.get_blacklist()
        self.pacer()
        keys = list(self.arms)
        ordered = [c for c in keys if c in feasible and c not in self.blacklist]
        if self.round_threshold < 100.0:
            durations = sorted(self.arms[c].duration for c in keys)
            self.round_prefer_duration = durations[
                min(int(len(durations) * self.round_threshold / 100.0), len(durations) - 1)
            ]
        else:
            self.round_prefer_duration = math.inf
        moving_reward = [self.arms[c].reward for c in ordered if self.arms[c].reward > 0]
        low, spread, clip = self.get_norm(moving_reward, self.args.clip_bound)
        scores: dict[int, float] = {}
        for c in ordered:
            arm = self.arms[c]
            if arm.count > 0:
                sc = (min(arm.reward, clip) - low) / float(spread) + math.sqrt(
                    0.1 * math.log(cur_time) / arm.time_stamp
                )
                if arm.duration > self.round_prefer_duration:
                    sc *= (float(self.round_prefer_duration) / max(1e-4, arm.duration)) ** self.args.round_penalty
                scores[c] = abs(sc)
        self.exploration = max(self.exploration * self.args.exploration_decay, self.args.exploration_min)
        exploration_len = int(num * self.exploration)
        exploit_len = min(num - exploration_len, len(scores))
        by_util = sorted(scores, key=scores.get, reverse=True)  # type: ignore[arg-type]
        self.exploit_clients = []
        if scores:  # port: the reference never runs with no client heard from
            cut = scores[by_util[min(exploit_len, len(by_util) - 1)]] * self.args.cut_off_util  # port: min
            picked: list[int] = []
            for c in by_util:
                if scores[c] < cut and len(picked) > 10.0 * exploit_len:
                    break
                picked.append(c)
            total = max(1e-4, float(sum(scores[c] for c in picked)))
            self.exploit_clients = [
                int(c)
                for c in rng.choice(np.array(picked), exploit_len, p=[scores[c] / total for c in picked], replace=False)
            ]
        self.explore_clients = []  # port: reset, where the reference keeps the last round's
        unexplored = [c for c in sorted(self.unexplored) if c in feasible]  # port: id order
        if unexplored:
            init_reward: dict[int, float] = {}
            for c in unexplored:
                init_reward[c] = self.arms[c].reward
                if self.arms[c].duration > self.round_prefer_duration:
                    init_reward[c] *= (
                        float(self.round_prefer_duration) / max(1e-4, self.arms[c].duration)
                    ) ** self.args.round_penalty
            explore_len = min(len(unexplored), num - len(self.exploit_clients))
            window = sorted(init_reward, key=init_reward.get, reverse=True)  # type: ignore[arg-type]
            window = window[: min(int(self.args.sample_window * explore_len), len(init_reward))]
            total = float(sum(init_reward[c] for c in window))
            p = [init_reward[c] / max(1e-4, total) for c in window]
            self.explore_clients = [int(c) for c in rng.choice(np.array(window), explore_len, p=p, replace=False)]
        return self.explore_clients + self.exploit_clients
