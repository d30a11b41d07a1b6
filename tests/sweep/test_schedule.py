"""Round-based placement follows Gavel's allocation and reaches its makespan; LPT is list scheduling."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.sweep.gavel import max_min_fairness, min_makespan
from fedsim.sweep.schedule import lpt, round_based

# 4 runs, 3 device types (one device each); runs 0 and 1 gain far more from the fast type than runs 2 and 3
THROUGHPUTS = np.array([[4.0, 1.0, 0.5], [3.0, 1.0, 0.5], [1.2, 1.0, 0.9], [1.1, 1.0, 0.9]])
STEPS = np.array([40.0, 40.0, 40.0, 40.0])
COUNTS = np.array([1, 1, 1])


def test_lpt_is_list_scheduling_to_the_first_free_device() -> None:
    schedule = lpt(THROUGHPUTS, STEPS, COUNTS, lengths=np.array([10.0, 20.0, 30.0, 40.0]))
    # longest first: run 3 to device 0 (fast), run 2 to device 1, run 1 to device 2 (slow), run 0 to the first
    # free: device 0 at 40 / 1.1 s
    (placed,) = schedule.placements
    assert placed == [(3, 0), (2, 1), (1, 2), (0, 0)]
    assert schedule.finish_s[3] == pytest.approx(40 / 1.1)
    assert schedule.finish_s[0] == pytest.approx(40 / 1.1 + 40 / 4.0)
    assert schedule.makespan_s == pytest.approx(max(40 / 1.0, 40 / 0.5, 40 / 1.1 + 10))


def test_round_based_placement_reaches_the_makespan_programmes_optimum() -> None:
    allocation = min_makespan(THROUGHPUTS, COUNTS, STEPS)
    schedule = round_based(THROUGHPUTS, STEPS, COUNTS, allocation.shares, round_s=0.5)
    assert schedule.makespan_s == pytest.approx(allocation.objective, rel=0.05)
    assert schedule.makespan_s < lpt(THROUGHPUTS, STEPS, COUNTS).makespan_s
    for placed in schedule.placements:  # one device per run, one run per device, each round
        assert len({m for m, _ in placed}) == len(placed) == len({d for _, d in placed})


def test_each_run_gets_the_time_shares_its_allocation_asks_for() -> None:
    steps = STEPS * 50  # long runs: shares settle
    allocation = max_min_fairness(THROUGHPUTS, COUNTS)
    schedule = round_based(THROUGHPUTS, steps, COUNTS, allocation.shares, round_s=1.0)
    first = int(schedule.finish_s.min())  # every run still training up to here
    received = np.zeros_like(THROUGHPUTS)
    for placed in schedule.placements[:first]:
        for m, device in placed:
            received[m, schedule.devices[device]] += 1
    np.testing.assert_allclose(received / first, allocation.shares, atol=0.06)


def test_a_run_that_cannot_train_anywhere_is_refused() -> None:
    with pytest.raises(ValueError, match="no run can be placed"):
        round_based(np.zeros((1, 2)), np.array([5.0]), np.array([1, 1]), np.zeros((1, 2)), 1.0)
