"""The synchronous round on the clock, worked out by hand on the 5-client trace: a round over-selects, ends at
its cohort's last arrival or at the deadline, and stops the stragglers; a restored state goes on alike."""

from __future__ import annotations

from fedsim.traces.rounds import SynchronousRounds
from tests.traces.test_clock import DURATION, Scripted
from tests.traces.test_traces import five


def scripted(cohort: int, over_select: int, deadline_s: float | None) -> SynchronousRounds:
    rounds = SynchronousRounds(five(), 5, cohort, over_select, 0, DURATION.__getitem__, deadline_s, max_draws=3)
    rounds.clock = Scripted(five(), 5, cohort + over_select, 0, DURATION.__getitem__, max_draws=3)
    return rounds


def test_a_round_ends_at_the_deadline_and_the_stragglers_are_stopped() -> None:
    rounds = scripted(cohort=2, over_select=1, deadline_s=10.0)
    # round 0 at t=0 (candidates 2, 0, 1 | 0, 3 | 4): 1 (30 s), 3 (4 s) and 4 (12 s) start; 3 arrives at 4; the
    # next arrival (12) is past the deadline (10): the round ends at 10 with 3 alone, 1 and 4 stopped
    log = rounds.next_round()
    assert [t.cid for t in log.started] == [1, 3, 4]
    assert log.applied == [(3, 0, 4.0, 1.0)] and log.dropped == [] and (log.clock_from, log.clock_to) == (0.0, 10.0)
    # round 1 at t=10 (candidates 1 | 1, 0 | 2, 3, 2): 1 starts again (ends at 40); 0 is online in [10, 20) but
    # needs 15 s: it drops at 20; the third slot finds nobody online; the deadline (20) passes with nothing in
    log = rounds.next_round()
    assert [t.cid for t in log.started] == [1, 0]
    assert log.applied == [] and log.dropped == [(0, 20.0)] and log.clock_to == 20.0
    assert rounds.version == 2 and rounds.clock.busy == set() and not rounds.clock.heap


def test_without_a_deadline_a_round_ends_when_its_cohort_has_reported() -> None:
    rounds = scripted(cohort=2, over_select=1, deadline_s=None)
    log = rounds.next_round()  # 3 arrives at 4, 4 at 12: two of three, the round ends at 12; 1 (30 s) stopped
    assert log.applied == [(3, 0, 4.0, 1.0), (4, 0, 12.0, 1.0)] and log.clock_to == 12.0 and log.reported == {3, 4}


def test_a_restored_state_goes_on_with_the_same_rounds() -> None:
    straight = scripted(cohort=2, over_select=1, deadline_s=25.0)
    straight.next_round()
    state = straight.state_dict()
    restored = scripted(cohort=2, over_select=1, deadline_s=25.0)
    restored.load_state_dict(state, restored.tensors())
    for _ in range(3):
        assert restored.next_round() == straight.next_round()
