"""Oort (Lai et al., OSDI 2021): its utility against the paper's formula written out in plain floats, its
exploration/exploitation split, the pacer, and what it chooses over many rounds: the fast and the lossy."""

from __future__ import annotations

import copy
import math
from collections import Counter
from typing import Any

import numpy as np
import pytest

from fedsim.config import OortSelection
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.selection import Oort, SelectionContext
from fedsim.sim.selection.oort import blacklist, normaliser, utilities

CFG = OortSelection()


def paper_utility(
    reward: list[float], arms: list[float], last: list[int], duration: list[float], r: int, preferred: float
) -> list[float]:
    """Section 4.2's utility, client by client, as FedScale's getTopK normalises it: the statistical utility
    clipped at the 0.9 quantile of every feasible arm's positive reward (``arms``, explored or not) and scaled
    by their minimum times 0.999 and range (at least 1e-4), plus sqrt(0.1 ln R / L_i), times (T / t_i)^2 for a
    client slower than T; absolute."""
    ordered = sorted(a for a in arms if a > 0)
    clip = ordered[min(int(len(ordered) * 0.9), len(ordered) - 1)]
    low, high = ordered[0] * 0.999, ordered[-1]
    spread = max(high - low, 1e-4)
    out = []
    for u, seen, t in zip(reward, last, duration, strict=True):
        score = (min(u, clip) - low) / spread + math.sqrt(0.1 * math.log(r) / seen)
        if t > preferred:
            score *= (preferred / t) ** 2.0
        out.append(abs(score))
    return out


def test_the_utility_is_the_papers_normalised_over_every_feasible_arm() -> None:
    reward = [120.0, 30.0, 400.0, 55.0, 0.5, 260.0]
    unexplored = [20.0, 900.0, 0.0]  # their initial rewards (samples) count in the range; the 0 does not
    last = [1, 3, 2, 5, 5, 4]
    duration = [10.0, 80.0, 35.0, 20.0, 5.0, 61.0]
    norm = normaliser(np.array(reward + unexplored), CFG.clip_bound)
    got = utilities(np.array(reward), np.array(last, dtype=float), np.array(duration), 6, 30.0, norm, 2.0)
    np.testing.assert_allclose(got, paper_utility(reward, reward + unexplored, last, duration, 6, 30.0), rtol=1e-12)
    explored_only = normaliser(np.array(reward), CFG.clip_bound)
    assert explored_only != norm  # 900 widens the range: normalising over the explored alone differs


def _record(cid: int, loss: float) -> ClientRecord:
    return ClientRecord(cid, 0, 0.0, 0.1, 10, 10, loss)


def _oort(population: int, cohort: int, duration: list[float], samples: list[int], **settings: Any) -> Oort:
    context = SelectionContext(0, population, cohort, samples=samples.__getitem__, duration=duration.__getitem__)
    return Oort(OortSelection(**settings), context)


def test_the_cohort_splits_between_exploration_and_exploitation_as_epsilon_says() -> None:
    duration = [1.0 + cid for cid in range(40)]
    oort = _oort(40, 10, duration, [20] * 40)
    oort.observe(0, [_record(cid, 1.0) for cid in range(20)])  # clients 0-19 heard from, 20-39 not
    for r in (1, 30, 200):
        epsilon = 0.9  # FedScale's getTopK: decayed once a call (round r is call r + 1), floored at 0.3
        for _ in range(r + 1):
            epsilon = max(epsilon * 0.98, 0.3)
        chosen = oort.select(r)
        assert len(chosen) == 10 == len(set(chosen))
        assert sum(cid >= 20 for cid in chosen) == int(10 * epsilon), r  # explored: the unheard ones


def test_the_preferred_duration_is_the_percentile_of_every_clients_duration() -> None:
    oort = _oort(100, 10, [float(cid) for cid in range(100)], [10] * 100)
    assert oort.preferred() == 30.0  # the 30th percentile of 0..99
    oort.threshold = 100.0
    assert oort.preferred() == math.inf


def test_the_pacer_first_moves_T_at_round_2W_driven_by_select_and_observe() -> None:
    """W = 20 rounds: FedScale's pacer records a utility every call (the first, nothing exploited yet, 0) and
    first compares two windows at call 2W = 40, fedsim's round 39. Every client reports loss 1.0 before round
    19 and 0.9 from it, so the window of calls 21-40 (rounds 19-38 exploited) sums to what calls 1-20 did
    (0, then round 0's exploitation, none, then 18 rounds): flat within 10%, T relaxes by 5 percentiles.
    Before the fix the pacer needed 2W observed rounds and first acted at round 59."""
    population = 200
    oort = _oort(population, 10, [1.0 + cid for cid in range(population)], [20] * population)
    thresholds = []
    for r in range(62):
        cohort = oort.select(r)
        thresholds.append(oort.threshold)
        oort.observe(r, [_record(cid, 1.0 if r < 19 else 0.9) for cid in cohort])
    assert thresholds[:39] == [30.0] * 39 and thresholds[39] == 35.0, thresholds
    assert oort.history[0] == 0.0 and all(u > 0 for u in oort.history[1:])  # round 0 exploited nobody


def test_exploitation_prefers_the_lossy_and_penalises_the_slow() -> None:
    """40 clients, all heard from: 0-9 have a high loss and are fast, 10-19 the same loss and 10x slower than
    T, 20-39 a low loss and fast. Over 300 rounds at the exploration floor the fast lossy ones are chosen most.
    The pacer is off (``pacer_delta: 0``, the artifact's "Oort w/o Pacer"): with nothing reported after round
    0 the utility is flat and it would relax T to every duration by round 200."""
    duration = [1.0] * 10 + [100.0] * 10 + [1.0] * 20
    oort = _oort(40, 8, duration, [20] * 40, exploration=0.0, exploration_min=0.0, pacer_delta=0.0)
    oort.observe(0, [_record(cid, 3.0 if cid < 20 else 0.3) for cid in range(40)])
    counts: Counter[int] = Counter()
    for r in range(1, 301):
        counts.update(oort.select(r))
    fast_lossy, slow_lossy, fast_fit = (
        sum(counts[c] for c in group) for group in (range(10), range(10, 20), range(20, 40))
    )
    assert fast_lossy > 2 * fast_fit / 2 and fast_lossy > 5 * slow_lossy, (fast_lossy, slow_lossy, fast_fit)


def test_exploration_prefers_fast_clients() -> None:
    duration = [1.0] * 20 + [50.0] * 20  # T is the 30th percentile: 1.0; the slow ones weigh (1/50)^2
    oort = _oort(40, 4, duration, [20] * 40, exploration=1.0, exploration_decay=1.0, exploration_min=1.0)
    counts: Counter[int] = Counter()
    for r in range(200):
        counts.update(oort.select(r))  # nothing observed: every client stays unexplored
    assert sum(counts[c] for c in range(20)) == 800  # the window holds the 20 fast ones: 5 x 4


def test_a_checkpoint_keeps_the_pacer_and_the_blacklist() -> None:
    """Saved before round 10 and restored into a fresh selector, rounds 10-24 choose as the uninterrupted run:
    T (moved by the pacer, W = 2) and the blacklist (clients over 1 round, counted from the reports) come back
    from the state and the tensors; epsilon is recomputed from the round."""
    settings: dict[str, Any] = {"pacer_step": 2, "blacklist_rounds": 1}
    durations, samples = [1.0 + c % 7 for c in range(60)], [10 + c % 5 for c in range(60)]

    def records(r: int, chosen: list[int]) -> list[ClientRecord]:
        return [_record(cid, 1.0 + cid / 10 + 5.0 * (r > 14)) for cid in chosen]

    whole = _oort(60, 5, durations, samples, **settings)
    cohorts, thresholds = [], []
    for r in range(25):
        if r == 10:
            saved = copy.deepcopy((whole.state_dict(), whole.tensors()))
        cohorts.append(whole.select(r))
        thresholds.append(whole.threshold)
        whole.observe(r, records(r, cohorts[-1]))
    resumed = _oort(60, 5, durations, samples, **settings)
    resumed.load_state_dict(*saved)
    for r in range(10, 25):
        assert resumed.select(r) == cohorts[r], r
        assert resumed.threshold == thresholds[r], r
        resumed.observe(r, records(r, cohorts[r]))
    assert len(set(thresholds[10:])) > 1 and resumed.history == whole.history  # the pacer moved after the save
    assert len(blacklist(whole.reports.rounds, 60, whole.cfg)) > 0


@pytest.mark.parametrize("availability", [0.5])
def test_only_reachable_clients_are_chosen(availability: float) -> None:
    from fedsim.sim.rounds.cohort import reachable

    context = SelectionContext(3, 50, 6, availability, samples=lambda c: 10, duration=lambda c: 1.0 + c % 7)
    oort = Oort(OortSelection(), context)
    for r in range(5):
        chosen = oort.select(r)
        assert len(chosen) == 6 and reachable(3, r, np.array(chosen), availability).all()
