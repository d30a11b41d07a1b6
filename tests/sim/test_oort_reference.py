"""fedsim's Oort against a port of the authors' selector (tests/sim/oort_reference.py: FedScale 7ec441c,
thirdparty/oort/oort.py, ``_training_selector``), driven round by round on the same fixed tables of samples,
task seconds, losses, who reports and who is online.

Randomness: the reference draws with numpy's global generator; here the port is handed, each round, the
generator fedsim draws that round's cohort from (``default_rng([seed, round, _DRAWS])``), so the two take the
same draws and the cohorts are compared exactly, draw for draw, as are the deterministic parts: the preferred
duration T (the pacer), epsilon, the blacklist and the exploited clients. Round ``r`` of fedsim is the
port's call ``r + 1``; a report of round ``r`` reaches the port with time stamp ``r + 1`` (the paper's L_i,
the round it trained, 1-based). The one place they differ by design (fedsim keeps the cohort whole when too
few clients are left to explore) is checked on its own at the end.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pytest

from fedsim.config import OortSelection
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.selection import Oort, SelectionContext
from fedsim.sim.selection.oort import _DRAWS, blacklist
from tests.sim.oort_reference import Args, ReferenceOort

SEED, POPULATION, COHORT = 5, 400, 8
_TABLES = np.random.default_rng(2021)
SAMPLES = _TABLES.integers(20, 25, size=POPULATION).tolist()  # per client
SECONDS = _TABLES.lognormal(0.0, 0.5, size=POPULATION).tolist()  # each client's task
SPREAD = _TABLES.random(POPULATION)  # each client's loss, around the round's level


def loss(r: int, cid: int) -> float:
    """Round ``r``'s loss of client ``cid``: level 1, ten times that from round 19 (a sharp rise the pacer
    meets at call 25 with W = 5), back to 1 from round 60."""
    level = 10.0 if 19 <= r < 60 else 1.0
    return level * (1.0 + 0.02 * float(SPREAD[cid]))


def reports(cid: int) -> bool:
    return cid % 11 != 0  # every 11th client never reports: chosen, it stays unexplored in both


def online_table(share: float, rounds: int) -> list[np.ndarray]:
    rng = np.random.default_rng(77)
    return [np.flatnonzero(rng.random(POPULATION) < share) for _ in range(rounds)]


def _record(cid: int, value: float) -> ClientRecord:
    return ClientRecord(cid, 0, 0.0, 0.1, SAMPLES[cid], SAMPLES[cid], value)


@dataclass
class Seen:
    """Round by round: the port's percentile of T, the blacklist's length, the cohort's."""

    T: list[float] = field(default_factory=list)
    blacklist: list[int] = field(default_factory=list)
    cohort: list[int] = field(default_factory=list)


def drive(settings: dict[str, float | int], share: float, rounds: int) -> Seen:
    """Both selectors over ``rounds`` rounds, compared each round; what the port's pacer and blacklist did."""
    cfg = OortSelection.model_validate(settings)
    online = online_table(share, rounds)
    now = [0]
    context = SelectionContext(
        SEED,
        POPULATION,
        COHORT,
        samples=SAMPLES.__getitem__,
        duration=SECONDS.__getitem__,
        online=lambda: online[now[0]],
    )
    oort = Oort(cfg, context)
    args = Args(**{k: v for k, v in cfg.model_dump().items() if k in Args.__dataclass_fields__})
    args.exploration_factor = cfg.exploration
    args.blacklist_rounds = -1 if cfg.blacklist_rounds is None else cfg.blacklist_rounds
    port = ReferenceOort(args)
    for cid in range(POPULATION):
        port.register_client(cid, float(SAMPLES[cid]), SECONDS[cid])
    seen = Seen()
    for r in range(rounds):
        now[0] = r
        banned = sorted(blacklist(oort.reports.rounds, POPULATION, cfg).tolist())
        chosen = oort.select(r)
        picked = port.get_top_k(COHORT, r + 1, set(online[r].tolist()), np.random.default_rng([SEED, r, _DRAWS]))
        assert chosen == sorted(picked), (r, chosen, sorted(picked))
        assert sorted(oort.exploited) == sorted(port.exploit_clients), r
        assert oort.preferred() == port.round_prefer_duration, r
        assert oort.epsilon(r + 1) == port.exploration, r
        assert banned == sorted(port.blacklist), r
        seen.T.append(port.round_threshold)
        seen.blacklist.append(len(banned))
        seen.cohort.append(len(chosen))
        heard = [cid for cid in chosen if reports(cid)]
        oort.observe(r, [_record(cid, loss(r, cid)) for cid in heard])
        for cid in heard:
            port.update_client_util(cid, float(SAMPLES[cid]) * loss(r, cid), SECONDS[cid], r + 1)
    return seen


@pytest.mark.parametrize(
    ("settings", "share"),
    [
        ({"pacer_step": 5}, 1.0),
        ({"pacer_step": 5}, 0.75),
        ({"pacer_step": 5, "blacklist_rounds": 1}, 0.75),
        ({"pacer_step": 5, "cut_off_util": 0.7, "clip_bound": 0.98, "exploration_min": 0.2}, 1.0),
    ],
    ids=["everyone-online", "three-quarters-online", "blacklist", "artifact-cutoff-clip-floor"],
)
def test_the_cohorts_are_the_references_round_by_round(settings: dict[str, float | int], share: float) -> None:
    """80 rounds at W = 5 (16 windows): every cohort, T, epsilon, blacklist and exploited set as the port's.
    The pacer is in play: the first check (call 2W = 10) finds 3 rounds of exploitation against 5 and leaves T;
    the next (call 15, round 14) finds the utility flat and relaxes it; the tenfold rise tightens it."""
    seen = drive(settings, share, 80)
    thresholds = seen.T
    assert thresholds[:14] == [30.0] * 14 and thresholds[14] == 35.0, thresholds
    steps = {b - a for a, b in itertools.pairwise(thresholds)}
    assert {5.0, -5.0} <= steps, thresholds
    assert set(seen.cohort) == {COHORT}
    if "blacklist_rounds" in settings:
        assert max(seen.blacklist) == int(0.3 * POPULATION), seen.blacklist


def test_the_defaults_choose_as_the_reference_over_2W_and_more() -> None:
    """FedScale's defaults (W = 20) over 50 rounds: the first check, at call 40 (round 39), meets the tenfold
    rise of round 19 and tightens T."""
    seen = drive({}, 0.9, 50)
    assert seen.T[:39] == [30.0] * 39 and seen.T[39] == 25.0, seen.T


def test_the_blacklist_is_the_most_trained_first_capped_at_its_share() -> None:
    """get_blacklist on a table of counts, worked by hand: over 2 rounds, most-trained first (ties by id), at most
    int(0.3 x 10) = 3."""
    cfg = OortSelection(blacklist_rounds=2)
    counts = {0: 3, 1: 5, 2: 1, 3: 3, 4: 4, 7: 3}
    assert blacklist(counts, 10, cfg).tolist() == [1, 4, 0]
    port = ReferenceOort(Args(blacklist_rounds=2))
    for cid in range(10):
        port.register_client(cid, 1.0, 1.0)
        port.arms[cid].count = counts.get(cid, 0)
    assert sorted(port.get_blacklist()) == [0, 1, 4]
    assert blacklist(counts, 10, OortSelection()).tolist() == []  # off by default, as the references' -1


def test_when_too_few_are_left_to_explore_exploitation_fills_the_cohort_where_the_reference_falls_short() -> None:
    """fedsim's departure: 12 clients, 10 heard from, a cohort of 8 at round 1 (epsilon 0.864: 6 to explore,
    2 left). FedScale exploits 8 - 6 = 2 and explores the 2: a cohort of 4. fedsim exploits 6: a cohort of 8."""
    samples, seconds = [20] * 12, [1.0] * 12
    context = SelectionContext(0, 12, 8, samples=samples.__getitem__, duration=seconds.__getitem__)
    oort = Oort(OortSelection(), context)
    port = ReferenceOort(Args())
    for cid in range(12):
        port.register_client(cid, 20.0, 1.0)
    oort.select(0)
    port.get_top_k(8, 1, set(range(12)), np.random.default_rng(0))
    oort.observe(0, [_record(cid, 1.0) for cid in range(10)])
    for cid in range(10):
        port.update_client_util(cid, 20.0, 1.0, 1)
    chosen = oort.select(1)
    picked = port.get_top_k(8, 2, set(range(12)), np.random.default_rng([0, 1, _DRAWS]))
    assert len(picked) == 4 and {10, 11} <= set(picked)
    assert len(chosen) == 8 and {10, 11} <= set(chosen) and len(oort.exploited) == 6
