"""The asynchronous run: the round loop's engine with a server step in place of a round.

Everything a run builds (data, model, algorithm, executor, state store, run store, checkpoints, evaluation,
the summary) is the round loop's; :meth:`AsyncEngine.round` runs the clock to the next server step
(:class:`fedsim.asynchronous.server.AsyncServer`), training the clients that started from one model in one
call of the executor (the fused executor trains them K at a time), and writes the step as a round: the clients
trained, the arrivals applied with their staleness and virtual time, the drops, the clock.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from fedsim.algorithms.base import RoundContext
from fedsim.asynchronous.server import AsyncServer, Result
from fedsim.config import ConfigError
from fedsim.config.algorithm import algorithm_entry, algorithm_names
from fedsim.data.base import FederatedDataset
from fedsim.models import ModelFactory
from fedsim.runstore import RoundRow
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.persist.kept import Saved
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.record import RoundRecord, StateFootprint, as_reported, clock_metrics
from fedsim.sim.rounds.steps import ServerRound
from fedsim.sim.run.settings import EngineSettings
from fedsim.tasks import Task
from fedsim.tasks.custom import LossFn
from fedsim.traces.clock import EventClock
from fedsim.traces.clock import Task as ClockTask


class AsyncEngine(Engine):
    """The round loop's run with the asynchronous server's steps in place of its rounds."""

    def __init__(
        self,
        cfg: EngineSettings,
        out_dir: Path,
        db_path: Path = Path("runs/fedsim.db"),
        dataset: FederatedDataset | None = None,
        resume: bool = False,
        model: ModelFactory | nn.Module | None = None,
        task: Task | LossFn | None = None,
    ) -> None:
        super().__init__(cfg, out_dir, db_path, dataset, False, model, task)
        self.trained: list[tuple[ClockTask, int]] = []  # the step's trained tasks with their ranks, in order
        self.server = self._server()
        if resume:
            self.resume()

    def _server(self) -> AsyncServer:
        cfg = self.cfg
        mode = cfg.asynchronous.kind
        sums = self.algorithm.sum_sizes(self.executor.replica.numel, self.executor.replica.n_params)
        if set(sums) != {"delta"}:
            raise ConfigError(
                f"asynchronous.kind={mode}: algorithm.kind={cfg.algorithm.kind} sends more than its model delta"
                f" ({', '.join(sorted(sums))}), which the asynchronous server does not apply yet"
            )
        if mode == "fedasync" and not type(cfg.algorithm).sends_local_model:  # declared, not read off the name
            entries = (algorithm_entry(name) for name in algorithm_names())
            mixable = [e.name for e in entries if e is not None and e.config.sends_local_model]
            raise ConfigError(
                f"asynchronous.kind=fedasync mixes each local model in: algorithm.kind={cfg.algorithm.kind} steps"
                f" its server by more than a local model; use {' or '.join(mixable)}, or kind=fedbuff"
            )
        if self.pool.world > 1 and self.stateful:
            raise ConfigError(
                f"asynchronous.kind={mode} on {self.pool.world} ranks: clients that keep state between tasks"
                f" (algorithm.kind={cfg.algorithm.kind}, client_optimizer.state) run on one rank so far"
            )
        numel, device, pool = self.executor.replica.numel, self.global_state.device, self.pool
        population = self.dataset.num_clients
        args = (cfg.asynchronous, cfg.clock, self.trace, population, cfg.seed, self.seconds, numel, device)
        rows = self.robust is not None and self.robust.cfg.gathers  # the rule reads every update of a buffer
        holds = self.privacy is not None  # one update of a client per buffer: what DP's accounting assumes
        return AsyncServer(*args, pool.rank, pool.world, pool.all_reduce_, keeps_rows=rows, holds=holds)

    def _train(self, tasks: list[tuple[ClockTask, int]], records: list[ClientRecord]) -> list[Result]:
        """Clients started from the global model as it is, as ``(task, owner)``: this rank trains its own in one
        call of the executor (fused: K at a time) and returns each one's delta or (FedAsync) local model; the
        other ranks' results hold their aggregation weight only."""
        mine = [task for task, owner in tasks if owner == self.pool.rank]
        versions = {task.version for task, _ in tasks}
        assert len(versions) == 1, f"one group trains from one model, not versions {sorted(versions)}"
        updates: dict[int, Tensor] = {}
        self.trained += tasks  # every rank's, in the order each trains its own: the step's records follow it
        version = tasks[0][0].version
        if self.attack is not None:  # which of the group's clients are malicious, counted once on every rank
            self.attack.begin_round(version, [task.cid for task, _ in tasks], ())
        if self.uplink is not None:  # the compressor's streams keyed by the version the group trains from
            self.uplink.begin_round(version, None)
        if mine:
            context = RoundContext(mine[0].version, self.global_state, self.opt)  # control: fixed only
            local_sum = self.executor.local_sum
            self.executor.begin_round()
            kept: list[dict[str, Tensor]] = []
            local_sum.kept = kept  # each client's weighted delta, as the executor adds it
            try:
                assignments = [(task.cid, 0) for task in mine]
                records += self.executor.train(context, assignments, None, self.uplink)
            finally:
                local_sum.kept = None
            for task, rows in zip(mine, kept, strict=True):
                delta = rows["delta"].div_(self._weight(task.cid))
                updates[task.cid] = delta.add_(self.global_state) if self.cfg.asynchronous.kind == "fedasync" else delta
        return [Result(updates.get(task.cid), self._weight(task.cid), owner) for task, owner in tasks]

    def _weight(self, cid: int) -> float:
        """A client's aggregation weight: 1 under DP (each update counts once), else as the algorithm weighs."""
        return 1.0 if self.privacy is not None else self.opt.client_weight(self.dataset.n_samples(cid))

    def _apply(self, sums: Mapping[str, Tensor]) -> None:
        """FedBuff's step on the buffer's sums (global over the ranks): the round's server half (the rule over
        the buffer's rows, DP's release of the noised sum over the buffer's fixed size, the algorithm's update and
        the optimiser), the buffer's rows handed to the rule first."""
        step, buffer, n_params = self.server.version, self.server.buffer, self.executor.replica.n_params
        if self.robust is not None and buffer is not None:
            slots = list(range(buffer.count))  # the buffer's arrivals in order (a client may arrive twice)
            self.robust.begin_round(step, slots, ())
            self.robust.prepare_(RoundContext(step, self.global_state, self.opt), self.executor.replica)
            if buffer.rows is not None:
                self.robust.gather_(slots, buffer.rows[: buffer.count], buffer.weights[: buffer.count])
        context = RoundContext(step, self.global_state, self.opt)
        at = ServerRound(step, context, sums, self.global_state, n_params, [], self.pool.all_reduce_, self.ledger)
        at.summed = at.trained = True  # the buffer's sums are global
        for part in self.steps:  # the round's server half, in its declared order (fedsim.sim.rounds.steps)
            part.apply_(at)
        if self.robust is not None:
            self.robust.rows = None  # the clients that train next do not add to this buffer's rows

    def round(self, r: int) -> RoundRow:
        """Server step ``r``: the clock runs until the step's update is applied."""
        t0 = time.perf_counter()
        mine: list[ClientRecord] = []
        server, self.trained = self.server, []
        log = server.step(lambda tasks: self._train(tasks, mine), self._apply, self.global_state)
        t_train = time.perf_counter() - t0
        gathered, moved = self.pool.all_gather(mine)
        records = sorted((rec for part in gathered for rec in part), key=lambda rec: rec.start)
        records = as_reported(records, self.attack, r)  # what the clients said they trained to
        self.ledger.record_moved(moved + server.moved)
        server.moved = 0
        self.ledger.charge(down=self.sizes.down * len(log.started), kind="model")
        self.ledger.charge(up=self._uploaded(gathered, len(log.applied)), kind="model")
        bytes_up, bytes_down = self.ledger.close_round()
        t_eval = time.perf_counter()
        evaluated = self._evaluate() if self.eval_due(r) else None
        t_eval = time.perf_counter() - t_eval
        record = RoundRecord(
            round=r,
            clients=records,
            planned=[len(records)],
            predicted_s=[0.0],
            actual_s=[log.clock_to - log.clock_from],
            cohort=len(log.started),
            dropped=len(log.dropped),
            bytes_up=bytes_up,
            bytes_down=bytes_down,
            bytes_uncompressed=self.sizes.down * len(log.started) + self.sizes.up * len(log.applied),
            bytes_up_uncompressed=self.sizes.up * len(log.applied),
            wall_s=time.perf_counter() - t0,
            train_s=t_train,
            evaluated=evaluated,
            federated=None,
            state=StateFootprint(len(self.store), self.store.memory_bytes(), self.store.disk_bytes()),
            lr=self.cfg.algorithm.client_lr(r),
            stages=clock_metrics(log, len(server.pending))
            | (self.privacy.round_metrics(r + 1) if self.privacy else {}),
            clock=(log.clock_from, log.clock_to),
            private=self.privacy.stored_statistics if self.privacy else None,
        )
        row = record.write(self.runstore, self.run_id) if self.runstore is not None else record.round_row("")
        record.add_to(self.totals, time.perf_counter() - t0 - t_eval)
        return row

    def _uploaded(self, gathered: list[list[ClientRecord]], applied: int) -> int:
        """The step's upload bytes: dense, each arrival's update; compressed, each update at its wire size,
        charged when its client trains (of the clients trained this step, those whose task arrives)."""
        if self.uplink is None:
            return self.sizes.up * applied
        sent = 0
        for rank, records in enumerate(gathered):
            tasks = [task for task, owner in self.trained if owner == rank]
            for task, rec in zip(tasks, records, strict=True):
                sent += (rec.delta_bytes or self.sizes.up) if task.arrives else 0
        return sent

    def gather_for_checkpoint(self) -> None:
        """Every rank's results in flight and part of the buffer: rank 0's checkpoint holds them all. The bytes
        this moves are counted now, so that the checkpoint's ledger holds them (a resume goes on from it)."""
        self.server.gather_(self.pool.all_gather)
        self.ledger.record_moved(self.server.moved)
        self.server.moved = 0

    def parts(self) -> list[Saved]:
        """The round loop's, and the clock with the results in flight."""
        return [*super().parts(), Saved("asynchronous", self.server)]

    @property
    def event_clock(self) -> EventClock:
        return self.server.clock

    def summary_fields(self, summary: Any) -> dict[str, Any]:
        """The round loop's summary (the clock's included) and the server's: its rule and its steps."""
        fields = super().summary_fields(summary)
        fields["asynchronous"] = {"kind": self.cfg.asynchronous.kind, "server_steps": self.server.version}
        return fields
