"""The asynchronous clock's event order on a 5-client trace, worked out by hand; going on from a saved state
gives the same events; the candidate stream is uniform and the same for a seed."""

from __future__ import annotations

import json

import numpy as np

from fedsim.traces.clock import EventClock
from tests.traces.test_traces import five

DURATION = [15.0, 30.0, 1.0, 4.0, 12.0]  # seconds of each client's task
DRAWS = [2, 0, 1, 0, 3, 4, 1, 1, 0, 2, 3, 2, 0, 4, 2, 2, 2, 3, 1, 0, 4, 1, 1, 1, 1]


class Scripted(EventClock):
    """The clock with the candidates written out, so that every event can be worked out by hand."""

    def candidate(self, k: int) -> int:
        return DRAWS[k]


def scripted() -> EventClock:
    return Scripted(five(), 5, concurrency=2, seed=0, duration=DURATION.__getitem__, max_draws=3, retry_s=60.0)


def log(clock: EventClock, events: int) -> list[tuple[float, str, int | None, int | None]]:
    """Pop ``events`` events, filling free slots after each at the version = events popped so far."""
    out: list[tuple[float, str, int | None, int | None]] = []
    for _ in range(events):
        ev = clock.pop()
        out.append((ev.time, ev.kind, ev.task.cid if ev.task else None, ev.task.version if ev.task else None))
        clock.fill(version=len(out))
    return out


def test_the_event_order_on_five_clients_is_the_one_worked_out_by_hand() -> None:
    clock = scripted()
    first = clock.fill(version=0)
    # t=0: 2 is never online, 0 comes online at 10, 1 is always online: 1 starts (30 s); 0 again, then 3 is
    # online in [0, 5) and its 4 s task fits: 3 starts
    assert [(t.cid, t.start, t.end, t.arrives) for t in first] == [(1, 0.0, 30.0, True), (3, 0.0, 4.0, True)]
    assert log(clock, 11) == [
        (4.0, "arrive", 3, 0),  # then 4 (always online) starts: arrives at 16
        (16.0, "arrive", 4, 1),  # 1 is busy twice; 0 is online in [10, 20) but needs 15 s: drops at 20
        (20.0, "drop", 0, 2),  # 2 never, 3 offline until 90, 2 never: the slot sleeps until 90
        (30.0, "arrive", 1, 0),  # 0 is online in [30, 40), needs 15 s: drops at 40
        (40.0, "drop", 0, 4),  # 4 starts at 40: arrives at 52
        (52.0, "arrive", 4, 5),  # 2, 2, 2: nobody ever online among them: a retry after 60 s, at 112
        (90.0, "wake", None, None),  # 3 is online in [90, 105) (its stretch runs on past the period): 4 s
        (94.0, "arrive", 3, 7),  # 1 starts at 94: arrives at 124
        (112.0, "wake", None, None),  # 0 is online in [110, 120) and needs 15 s: drops at 120
        (120.0, "drop", 0, 9),  # 4 starts at 120
        (124.0, "arrive", 1, 8),
    ]


def test_a_clock_restored_from_its_state_goes_on_with_the_same_events() -> None:
    straight = scripted()
    straight.fill(version=0)
    whole = log(straight, 11)
    first = scripted()
    first.fill(version=0)
    head = log(first, 4)
    saved = json.loads(json.dumps(first.state_dict()))  # as a checkpoint holds it
    second = scripted()
    second.load_state_dict(saved)
    tail: list[tuple[float, str, int | None, int | None]] = []
    for _ in range(7):
        ev = second.pop()
        tail.append((ev.time, ev.kind, ev.task.cid if ev.task else None, ev.task.version if ev.task else None))
        second.fill(version=len(head) + len(tail))
    assert head + tail == whole
    assert second.busy == straight.busy and second.draws == straight.draws


def test_candidates_are_uniform_over_the_population_and_fixed_by_the_seed() -> None:
    clock = EventClock(five(), 1_000_000, 10, seed=7, duration=lambda cid: 1.0)
    draws = np.array([clock.candidate(k) for k in range(4000)])
    assert draws.min() >= 0 and draws.max() < 1_000_000
    # uniform: each tenth of the population gets 400 +- 4 sd (sd = sqrt(4000 * 0.1 * 0.9) = 19)
    counts = np.bincount(draws // 100_000, minlength=10)
    assert np.all(np.abs(counts - 400) < 76)
    again = EventClock(five(), 1_000_000, 10, seed=7, duration=lambda cid: 1.0)
    assert [again.candidate(k) for k in range(50)] == draws[:50].tolist()
    other = EventClock(five(), 1_000_000, 10, seed=8, duration=lambda cid: 1.0)
    assert [other.candidate(k) for k in range(50)] != draws[:50].tolist()
