"""A synchronous round on the trace's event clock (Bonawitz et al., MLSys 2019; FedScale's over-commitment).

Every slot starts a client at once: ``cohort + over_select`` online clients, drawn uniformly as the asynchronous
server draws them (:class:`fedsim.traces.clock.EventClock`), or chosen by the run's selector from the clients
online at the round's start, each task lasting its device's compute and links.
The round ends when ``cohort`` updates have arrived or at the deadline, whichever is first; a client that goes
offline before its task ends drops then, and the stragglers still training when the round ends are stopped,
their work thrown away. Which clients report, and when, is known from the trace before anyone trains: the
round's log (:class:`StepLog`) says whom the engine trains and which of the started clients count as dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from fedsim.traces.clock import EventClock, Task
from fedsim.traces.format import Trace


@dataclass
class StepLog:
    """What one round or server step saw on the clock: the tasks started, the arrivals applied as (client,
    staleness, time, weight) and the drops as (client, time), and the clock before and after."""

    started: list[Task] = field(default_factory=list)
    applied: list[tuple[int, int, float, float]] = field(default_factory=list)
    dropped: list[tuple[int, float]] = field(default_factory=list)
    clock_from: float = 0.0
    clock_to: float = 0.0
    not_started: list[int] | None = None  # chosen by a selector but not started (None: the clock's own draw)

    @property
    def reported(self) -> set[int]:
        return {cid for cid, *_ in self.applied}


class SynchronousRounds:
    """Round after round on one clock; its state (the clock and the rounds so far) goes into a checkpoint."""

    def __init__(
        self,
        trace: Trace,
        population: int,
        cohort: int,
        over_select: int,
        seed: int,
        duration: Callable[[int], float],
        deadline_s: float | None = None,
        max_draws: int = 64,
        retry_s: float = 60.0,
    ) -> None:
        self.cohort, self.deadline_s = cohort, deadline_s
        self.clock = EventClock(trace, population, cohort + over_select, seed, duration, max_draws, retry_s)
        self.version = 0  # rounds so far: the version the round's clients start from

    def next_round(self, choose: Callable[[], Sequence[int]] | None = None) -> StepLog:
        """Start every slot's client now and run the clock until ``cohort`` updates have arrived or the deadline
        has passed; the stragglers are stopped. ``choose`` is the run's selector: it picks the clients to start
        from those online now (:meth:`EventClock.online_now`), after the clock has waited for one to be; None
        is the clock's own uniform draw."""
        clock = self.clock
        log = StepLog(clock_from=clock.now)
        if choose is None:
            log.started = clock.fill(self.version)
        else:
            clock.wait_for_online()
            chosen = [int(cid) for cid in choose()]
            log.started = clock.start(chosen, self.version)
            started = {task.cid for task in log.started}
            log.not_started = [cid for cid in chosen if cid not in started]
        deadline = clock.now + (self.deadline_s or math.inf)
        while len(log.applied) < self.cohort and clock.heap:
            if clock.next_time() > deadline:
                clock.now = deadline
                break
            event = clock.pop()
            if event.task is None:  # a slot that found nobody online: it joins the next round
                continue
            if event.kind == "drop":
                log.dropped.append((event.task.cid, event.time))
            else:
                log.applied.append((event.task.cid, 0, event.time, 1.0))
        clock.cancel_all()
        self.version += 1
        log.clock_to = clock.now
        return log

    def state_dict(self) -> dict[str, Any]:
        return {"version": self.version, "clock": self.clock.state_dict()}

    def tensors(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.version = int(state["version"])
        self.clock.load_state_dict(dict(state["clock"]))
