"""The synchronous baseline on the clock, worked out by hand on the 5-client trace: a round over-selects, ends
at its buffer's last arrival or at the deadline, applies the mean of what arrived and drops the stragglers."""

from __future__ import annotations

import torch

from fedsim.asynchronous.clock import Task
from fedsim.asynchronous.server import AsyncServer, Result
from fedsim.config import AsyncConfig
from tests.asynchronous.test_clock import DURATION, Scripted
from tests.traces.test_traces import five


def test_a_synchronous_round_ends_at_the_deadline_with_the_mean_of_what_arrived() -> None:
    cfg = AsyncConfig(kind="sync", concurrency=3, buffer=2, deadline_s=10.0, max_draws=3)
    server = AsyncServer(cfg, five(), 5, 0, DURATION.__getitem__, 2, torch.device("cpu"))
    server.clock = Scripted(five(), 5, 3, 0, DURATION.__getitem__, max_draws=3)
    trained: list[Task] = []

    def train(tasks: list[tuple[Task, int]]) -> list[Result]:
        trained.extend(task for task, _ in tasks)
        return [Result(torch.full((2,), float(task.cid)), 1.0, owner) for task, owner in tasks]

    applied: list[torch.Tensor] = []
    model = torch.zeros(2)
    # round 0 at t=0: 1 (30 s), 3 (4 s) and 4 (12 s) start; 3 arrives at 4; the next arrival (12) is past the
    # deadline (10): the round ends at 10 with 3's update alone, and 1 and 4 are dropped as stragglers
    log = server.step(train, lambda sums: applied.append(sums["delta"] / float(sums["weight"])), model)
    assert [t.cid for t in trained] == [1, 3, 4]
    assert log.applied == [(3, 0, 4.0, 1.0)] and log.dropped == [] and log.clock_to == 10.0
    assert torch.equal(applied[0], torch.tensor([3.0, 3.0])) and server.version == 1 and not server.pending
    # round 1 at t=10: 1 starts again (40), 0 is online in [10, 20) but needs 15 s (drops at 20), the third
    # slot finds nobody online (2 never, 3 at 90): the deadline (20) passes with nothing arrived, the model stays
    log = server.step(train, lambda sums: applied.append(sums["delta"]), model)
    assert [t.cid for t in trained[3:]] == [1, 0]
    assert log.applied == [] and log.dropped == [(0, 20.0)] and log.clock_to == 20.0
    assert len(applied) == 1 and server.version == 2 and server.clock.busy == set()


def test_fedbuff_trains_the_clients_started_from_one_model_as_one_group() -> None:
    """On the scripted 5-client clock (tests/asynchronous/test_clock.py's events, K = 2): a group is trained when
    one of its events comes up or before the model moves, never across a server step."""
    cfg = AsyncConfig(kind="fedbuff", concurrency=2, buffer=2, max_draws=3, retry_s=60.0)
    server = AsyncServer(cfg, five(), 5, 0, DURATION.__getitem__, 2, torch.device("cpu"))
    server.clock = Scripted(five(), 5, 2, 0, DURATION.__getitem__, max_draws=3, retry_s=60.0)
    groups: list[list[tuple[int, int]]] = []

    def train(tasks: list[tuple[Task, int]]) -> list[Result]:
        groups.append([(task.cid, task.version) for task, _ in tasks])
        return [Result(torch.ones(2), 1.0, owner) for _, owner in tasks]

    model = torch.zeros(2)
    server.step(train, lambda sums: None, model)
    # 1 and 3 start at 0 and train when 3 arrives (4 s); 4 starts then and trains when it arrives (16 s), which
    # fills the buffer: step 0 ends
    assert groups == [[(1, 0), (3, 0)], [(4, 0)]]
    server.step(train, lambda sums: None, model)
    # 0 starts (drops at 20), 1 arrives stale at 30, 0 starts again (drops at 40), 4 starts at 40 and arrives
    # at 52: step 1 ends
    assert groups[2:] == [[(0, 1)], [(0, 1)], [(4, 1)]] and server.version == 2 and not server.untrained
