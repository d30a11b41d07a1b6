"""The band policy on scripted estimates, and the model-traveling estimator on a scripted scorer."""

from __future__ import annotations

import pytest

from fedsim.control.band import BandPolicy
from fedsim.control.estimate import TravelEstimator

LADDER = [1.0, 2.0, 4.0, 8.0, 16.0]


def run(policy: BandPolicy, estimates: list[float]) -> list[tuple[str, float]]:
    return [(d.action, d.new) for d in (policy.decide(e) for e in estimates)]


def test_above_high_tightens_at_once_down_to_the_tightest() -> None:
    policy = BandPolicy(LADDER, low=1, high=3)
    assert run(policy, [5, 4, 3.5, 9, 9, 9]) == [
        ("tighten", 8),
        ("tighten", 4),
        ("tighten", 2),
        ("tighten", 1),
        ("hold", 1),  # never below the ladder
        ("hold", 1),
    ]


def test_below_low_loosens_only_after_two_probes_in_a_row() -> None:
    policy = BandPolicy(LADDER, low=1, high=3, start=0)
    # low, in band (resets), low, low -> loosen, low, low -> loosen, low, high -> tighten
    assert run(policy, [0.5, 2, 0.2, 0.1, 0.3, 0.0, 0.4, 7]) == [
        ("hold", 1),
        ("hold", 1),
        ("hold", 1),
        ("loosen", 2),
        ("hold", 2),
        ("loosen", 4),
        ("hold", 4),
        ("tighten", 2),
    ]


def test_in_band_holds_and_loosest_is_a_bound() -> None:
    policy = BandPolicy(LADDER, low=1, high=3)
    assert run(policy, [2, 1, 3, 0, 0, 0, 0]) == [("hold", 16)] * 7


def test_state_round_trips_mid_sequence() -> None:
    a = BandPolicy(LADDER, low=1, high=3, start=2)
    run(a, [0.1])  # one low reading pending
    b = BandPolicy(LADDER, low=1, high=3)
    b.load_state_dict(a.state_dict())
    assert b.value == 4 and b.probes == 1
    assert run(b, [0.1]) == [("loosen", 8)]  # the pending low reading survived the round trip
    assert run(a, [0.1]) == [("loosen", 8)]
    with pytest.raises(ValueError, match="outside the ladder"):
        BandPolicy([1, 2], low=1, high=3).load_state_dict(a.state_dict())


@pytest.mark.parametrize(("ladder", "low", "high", "start"), [([], 1, 3, None), ([1], 3, 1, None), ([1, 2], 1, 3, 5)])
def test_bad_settings_are_refused(ladder: list[float], low: float, high: float, start: int | None) -> None:
    with pytest.raises(ValueError):
        BandPolicy(ladder, low, high, start)


def test_estimate_is_the_smoothed_median_gap() -> None:
    own = {0: 0.9, 1: 0.8, 2: 0.7}

    def score(i: int, j: int) -> float:  # travelling costs 10 points, except from partition 2: 40
        return own[j] if i == j else own[j] - (0.4 if i == 2 else 0.1)

    est = TravelEstimator(partitions=3, pairs=6, smoothing=0.5, seed=0)
    value, gaps = est.probe(score)
    assert sorted((i, j) for i, j, _ in gaps) == [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]
    assert value == pytest.approx(10.0)  # median of four 10s and two 40s
    value, _ = est.probe(lambda i, j: own[j] - 0.3 if i != j else own[j])
    assert value == pytest.approx(0.5 * 30 + 0.5 * 10)


def test_pairs_are_seeded_distinct_and_state_round_trips() -> None:
    a = TravelEstimator(partitions=5, pairs=4, smoothing=1.0, seed=7)
    b = TravelEstimator(partitions=5, pairs=4, smoothing=1.0, seed=7)
    first = a.sample_pairs()
    assert first == b.sample_pairs()
    assert len(set(first)) == 4 and all(i != j for i, j in first)
    c = TravelEstimator(partitions=5, pairs=4, smoothing=1.0, seed=0)
    c.load_state_dict(a.state_dict())
    assert c.sample_pairs() == a.sample_pairs()
