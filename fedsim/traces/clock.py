"""The asynchronous server's virtual clock: which client starts when, and when its update arrives or it drops.

The server keeps up to ``concurrency`` tasks in flight. Whenever a slot is free at time ``now`` it draws
candidates uniformly from the population (with replacement, from a stream keyed by the seed and the draw's
number, so a draw costs the same for a population of a thousand or of a million) and starts the first one
that is online at ``now`` and not already training. Its task lasts the trace's compute for its samples plus
the model down and the update up; if the client goes offline before the task ends, the task drops at that
moment (its update is lost, as FedScale drops a client that leaves mid-round) and the slot is free again. If
``max_draws`` candidates are all offline or busy, the slot sleeps until the first of them comes online (or
``retry_s``) and draws again.

Events are ordered by time, then by the order in which their tasks started, so the log is a function of the
seed, the trace and the population; :meth:`EventClock.state_dict` holds everything needed to go on exactly.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from fedsim.traces.format import Trace

STREAM = 0x41_53_59_4E  # "ASYN": the candidates' stream, apart from every other stream of the seed

Kind = Literal["arrive", "drop", "wake"]


@dataclass(frozen=True)
class Task:
    """Client ``cid`` starts at ``start`` from server version ``version``; its update arrives at ``end`` (or,
    when ``arrives`` is false, it drops then)."""

    cid: int
    start: float
    end: float
    version: int
    arrives: bool


@dataclass(frozen=True)
class Event:
    time: float
    kind: Kind
    task: Task | None  # None for a slot's wake-up


class EventClock:
    def __init__(
        self,
        trace: Trace,
        population: int,
        concurrency: int,
        seed: int,
        duration: Callable[[int], float],
        max_draws: int = 64,
        retry_s: float = 60.0,
    ) -> None:
        self.trace, self.population, self.concurrency, self.seed = trace, population, concurrency, seed
        self.duration, self.max_draws, self.retry_s = duration, max_draws, retry_s
        self.now = 0.0
        self.draws = 0  # candidates drawn so far: the stream's position
        self.seq = 0  # events scheduled so far: ties in time go in this order
        self.free = concurrency  # slots with nothing in flight and no wake-up pending
        self.heap: list[tuple[float, int, Kind, Task | None]] = []
        self.busy: set[int] = set()
        self.held: set[int] = set()  # not drawn until released: FedBuff's under DP, whose update waits in the buffer

    def candidate(self, k: int) -> int:
        """The ``k``-th candidate of the run: uniform over the population, the same on every rank."""
        return int(np.random.default_rng([self.seed, STREAM, k]).integers(self.population))

    def fill(self, version: int) -> list[Task]:
        """Start a task in every free slot at ``now`` (clients train from server ``version``); the tasks
        started, in order. A slot that finds nobody online sleeps instead."""
        started: list[Task] = []
        while self.free > 0:
            self.free -= 1
            task = self._start(version)
            if task is not None:
                started.append(task)
        return started

    def _start(self, version: int) -> Task | None:
        soonest = math.inf
        for _ in range(self.max_draws):
            cid = self.candidate(self.draws)
            self.draws += 1
            if cid in self.busy or cid in self.held:
                continue
            if not self.trace.online(cid, self.now):
                soonest = min(soonest, self.trace.next_online(cid, self.now))
                continue
            return self._begin(cid, version)
        self._push(soonest if math.isfinite(soonest) else self.now + self.retry_s, "wake", None)
        return None

    def _begin(self, cid: int, version: int) -> Task:
        """Client ``cid``, online and idle, starts its task now: it arrives after its duration, or drops when it
        goes offline first."""
        end = self.now + self.duration(cid)
        gone = self.trace.online_until(cid, self.now)
        task = Task(cid, self.now, min(end, gone), version, arrives=end <= gone)
        self.busy.add(cid)
        self._push(task.end, "arrive" if task.arrives else "drop", task)
        return task

    def online_now(self) -> np.ndarray:
        """The clients of the population online at ``now`` and not training, sorted: what a selector on this
        clock chooses from. It asks the trace of every client, so it costs O(population)."""
        return np.array(
            [c for c in range(self.population) if c not in self.busy and self.trace.online(c, self.now)],
            dtype=np.int64,
        )

    def wait_for_online(self) -> None:
        """Move ``now`` to the first moment a client is online (``retry_s`` on, when the trace has nobody ever)."""
        if not len(self.online_now()):
            soonest = min((self.trace.next_online(c, self.now) for c in range(self.population)), default=math.inf)
            self.now = soonest if math.isfinite(soonest) else self.now + self.retry_s

    def start(self, cids: Sequence[int], version: int) -> list[Task]:
        """Start the chosen clients now, in order, as many as there are free slots; a client offline or already
        training is not started (a selector that ignored the clock's availability loses that seat)."""
        started: list[Task] = []
        for cid in cids:
            if self.free == 0:
                break
            if cid in self.busy or not self.trace.online(int(cid), self.now):
                continue
            self.free -= 1
            started.append(self._begin(int(cid), version))
        return started

    def _push(self, time: float, kind: Kind, task: Task | None) -> None:
        heapq.heappush(self.heap, (time, self.seq, kind, task))
        self.seq += 1

    def pop(self) -> Event:
        """The next event; the clock moves to its time and its slot is free again."""
        time, _, kind, task = heapq.heappop(self.heap)
        self.now = time
        self.free += 1
        if task is not None:
            self.busy.discard(task.cid)
        return Event(time, kind, task)

    def next_time(self) -> float:
        """When the next event happens (``inf`` when none is scheduled)."""
        return self.heap[0][0] if self.heap else math.inf

    def cancel_all(self) -> None:
        """End every task in flight and every slot's sleep (a synchronous round's stragglers)."""
        self.heap, self.busy, self.free = [], set(), self.concurrency

    def in_flight(self) -> list[Task]:
        return [task for _, _, _, task in sorted(self.heap) if task is not None]

    def state_dict(self) -> dict[str, Any]:
        """Everything the clock needs to go on from here exactly (JSON-ready)."""
        events = [[t, s, k, None if x is None else _task_list(x)] for t, s, k, x in self.heap]
        return {"now": self.now, "draws": self.draws, "seq": self.seq, "free": self.free, "events": events}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.now, self.draws = float(state["now"]), int(state["draws"])
        self.seq, self.free = int(state["seq"]), int(state["free"])
        self.heap = []
        for time, seq, kind, task in state["events"]:
            self.heap.append((float(time), int(seq), kind, None if task is None else _task(task)))
        heapq.heapify(self.heap)
        self.busy = {t.cid for t in self.in_flight()}
        self.held = set()  # FedBuff releases its held clients at every step's end, where a checkpoint is taken


def _task_list(task: Task) -> list[Any]:
    return [task.cid, task.start, task.end, task.version, task.arrives]


def _task(values: list[Any]) -> Task:
    return Task(int(values[0]), float(values[1]), float(values[2]), int(values[3]), bool(values[4]))
