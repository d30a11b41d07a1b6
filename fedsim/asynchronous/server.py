"""The asynchronous server: the clock's events applied to the global model, one server step at a time.

A step fills the free slots, pops events in order and applies each arrival: FedBuff adds it to the buffer
and steps when the buffer holds ``K``; FedAsync mixes it in. A step ends with the server's update, so a run's
``rounds`` count server steps; a drop loses its client's result. A started client trains from the model as it
was at its start: the clients started since the model last moved wait in ``untrained`` and train together (the
fused executor's group) when one of their events comes up or before the model moves, and each result waits in
``pending`` until its arrival. The groups are a function of the event order alone, and none is open when a step
ends, so everything needed to go on exactly (clock, version, buffer, pending results) is in
:meth:`AsyncServer.state_dict` and :meth:`AsyncServer.tensors`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from fedsim.asynchronous.rules import Buffer, fedasync_mix_, staleness_weight
from fedsim.config import AsyncConfig, ClockConfig, ConfigError
from fedsim.traces import Trace
from fedsim.traces.clock import Event, EventClock, Task
from fedsim.traces.rounds import StepLog


@dataclass(frozen=True)
class Result:
    """A trained client's upload, held until it arrives: FedBuff's delta (local minus start) or FedAsync's local
    model (None on the ranks that did not train it), its aggregation weight and the rank that trained it."""

    update: Tensor | None
    weight: float
    owner: int = 0


Train = Callable[[list[tuple[Task, int]]], list["Result"]]  # (task, owner rank) started from one model -> results


class AsyncServer:
    def __init__(
        self,
        cfg: AsyncConfig,
        clock: ClockConfig,
        trace: Trace,
        population: int,
        seed: int,
        duration: Callable[[int], float],
        numel: int,
        device: torch.device,
        rank: int = 0,
        world: int = 1,
        all_reduce_: Callable[[Tensor], int] | None = None,
        keeps_rows: bool = False,
        holds: bool = False,
    ) -> None:
        """``keeps_rows``: FedBuff's buffer keeps each arrival's row for a rule that reads every update;
        ``holds``: a client whose update waits in the buffer is not drawn again until the step (so one client
        adds at most one update to a step, what DP's accounting of the buffer assumes)."""
        self.cfg = cfg
        self.rank, self.world = rank, world
        self.all_reduce_ = all_reduce_ or (lambda tensor: 0)
        self.moved = 0  # bytes the ranks exchanged, for the ledger
        self.started = 0  # tasks started so far: task k is trained by rank k % world
        self.held: dict[int, Tensor] = {}  # every rank's results in flight, gathered for a checkpoint
        self.held_buffer: Tensor | None = None  # and the buffer summed over the ranks
        self.trace = trace
        self.clock = EventClock(trace, population, cfg.concurrency, seed, duration, clock.max_draws, clock.retry_s)
        self.device = device
        self.buffer = Buffer(numel, device, cfg.buffer if keeps_rows else 0) if cfg.kind == "fedbuff" else None
        self.holds = holds
        self.pending: dict[int, Result] = {}
        self.untrained: list[tuple[Task, int]] = []  # started from the model as it is, with their ranks
        self.version = 0  # server steps so far

    def _start(self, log: StepLog) -> None:
        """Every task the clock starts now, to be trained by rank ``k % world`` (task k of the run)."""
        for task in self.clock.fill(self.version):
            self.untrained.append((task, self.started % self.world))
            self.started += 1
            log.started.append(task)

    def _train(self, train: Train) -> None:
        """The clients started since the model last moved, trained as one group (each rank its own)."""
        if self.untrained:
            results = train(self.untrained)
            self.pending.update((task.cid, result) for (task, _), result in zip(self.untrained, results, strict=True))
            self.untrained = []

    def _pop(self, train: Train) -> Event:
        """The next event; its client's group trained first when it is still waiting."""
        event = self.clock.pop()
        if event.task is not None and event.task.cid not in self.pending:
            self._train(train)
        return event

    def _reduce_(self, tensor: Tensor) -> None:
        if self.world > 1:
            self.moved += self.all_reduce_(tensor)

    def weight_of(self, staleness: int) -> float:
        return staleness_weight(self.cfg.staleness, staleness, self.cfg.staleness_a, self.cfg.staleness_b)

    def step(self, train: Train, apply_buffer: Callable[[Mapping[str, Tensor]], None], model: Tensor) -> StepLog:
        """Run the clock to the next server step: ``train([(task, owner), ...])`` trains clients started from
        ``model`` as it is (each on rank ``owner``) and returns their results in order; FedBuff's buffer, summed
        over the ranks, goes to ``apply_buffer`` when full; FedAsync mixes each arrival (its owner's, summed with
        the others' zeros) into ``model`` in place."""
        log = StepLog(clock_from=self.clock.now)
        while True:
            self._start(log)
            if not self.clock.heap:
                raise ConfigError("asynchronous: no client of the trace is ever online")
            event = self._pop(train)
            task = event.task
            if task is None:  # a sleeping slot woke: the next fill draws again
                continue
            result = self.pending.pop(task.cid)
            if event.kind == "drop":
                log.dropped.append((task.cid, event.time))
                continue
            staleness = self.version - task.version
            weight = self.weight_of(staleness)
            log.applied.append((task.cid, staleness, event.time, weight))
            if self.buffer is not None:
                self.buffer.add_(result.update, result.weight, weight)
                if self.holds:
                    self.clock.held.add(task.cid)
                if self.buffer.count < self.cfg.buffer:
                    continue
                self._train(train)  # the model moves: whoever started from it trains now
                self._reduce_(self.buffer.delta)
                apply_buffer(self.buffer.sums())
                self.buffer.clear_()  # a step ends with an empty buffer: a checkpoint holds no rows, no one held
                self.clock.held.clear()
            else:
                self._train(train)
                local = result.update if result.update is not None else torch.zeros_like(model)
                if self.world > 1:
                    local = local.clone()
                    self._reduce_(local)
                fedasync_mix_(model, local, self.cfg.alpha, weight)
            self.version += 1
            log.clock_to = self.clock.now
            return log

    def state_dict(self) -> dict[str, Any]:
        assert not self.untrained, "a step ends with every started client trained"
        buffer = None if self.buffer is None else {"weight": self.buffer.weight, "count": self.buffer.count}
        pending = {str(cid): [r.weight, r.owner] for cid, r in self.pending.items()}
        clock = self.clock.state_dict()
        return {"version": self.version, "started": self.started, "clock": clock, "buffer": buffer, "pending": pending}

    def gather_(self, all_gather: Callable[[Any], tuple[list[Any], int]]) -> None:
        """Every rank's results in flight, and its part of the buffer, onto every rank's view for a checkpoint
        (rank 0 writes them all); a collective: every rank calls it."""
        mine = {cid: r.update.to("cpu") for cid, r in self.pending.items() if r.update is not None}
        gathered, moved = all_gather(mine)
        self.moved += moved
        self.held = {cid: update for part in gathered for cid, update in part.items()}
        if self.buffer is not None:
            parts, moved = all_gather(self.buffer.delta.to("cpu"))
            self.moved += moved
            self.held_buffer = torch.stack(parts).sum(0) if len(parts) > 1 else parts[0]

    def tensors(self) -> dict[str, Tensor]:
        """The results in flight and the buffer, every rank's (after :meth:`gather_` when there are several)."""
        own = {c: r.update for c, r in self.pending.items() if r.update is not None}
        updates = self.held if self.world > 1 else own
        out = {f"async.pending.{cid}": update for cid, update in updates.items()}
        if self.buffer is not None:
            held = self.held_buffer if self.world > 1 else None
            out["async.buffer"] = held if held is not None else self.buffer.delta
        return out

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        """Back to a checkpoint's state; each rank keeps the results (and rank 0 the buffer) it trains on now."""
        self.version, self.started = int(state["version"]), int(state["started"])
        self.clock.load_state_dict(dict(state["clock"]))
        self.pending = {}
        for cid, (weight, owner) in state["pending"].items():
            mine = int(owner) % self.world == self.rank
            update = tensors[f"async.pending.{cid}"].to(self.device, copy=True) if mine else None
            self.pending[int(cid)] = Result(update, float(weight), int(owner) % self.world)
        if self.buffer is not None and state["buffer"] is not None:
            self.buffer.delta.copy_(tensors["async.buffer"] if self.rank == 0 else torch.zeros_like(self.buffer.delta))
            self.buffer.weight, self.buffer.count = float(state["buffer"]["weight"]), int(state["buffer"]["count"])
