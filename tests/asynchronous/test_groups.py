"""FedBuff's groups on the scripted 5-client clock: the clients started from one model train together."""

from __future__ import annotations

import torch

from fedsim.asynchronous.server import AsyncServer, Result
from fedsim.config import AsyncConfig, ClockConfig
from fedsim.traces.clock import Task
from tests.traces.test_clock import DURATION, Scripted
from tests.traces.test_traces import five


def test_fedbuff_trains_the_clients_started_from_one_model_as_one_group() -> None:
    """On the scripted 5-client clock (tests.traces.test_clock.py's events, K = 2): a group is trained when
    one of its events comes up or before the model moves, never across a server step."""
    cfg, clock = AsyncConfig(kind="fedbuff", concurrency=2, buffer=2), ClockConfig(kind="trace", max_draws=3)
    server = AsyncServer(cfg, clock, five(), 5, 0, DURATION.__getitem__, 2, torch.device("cpu"))
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
