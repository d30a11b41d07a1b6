"""The round loop of a federated simulation.

Read top to bottom, one round is: sample a cohort, plan which device trains which client, let each rank train
its devices' clients one after another on its one replica into a local sum, combine the sums with one
all-reduce, apply the server update (on every rank, from the same sums), write the round to the run store, and
every ``eval_every`` rounds evaluate and every ``checkpoint.every`` rounds checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from fedsim.algorithms import build_algorithm
from fedsim.algorithms.base import ROUND_SEGMENTS, UPLOADED_ROUND_SEGMENTS, RoundContext
from fedsim.algorithms.server import ServerOptimizerContext, ServerStep
from fedsim.comm.downlink import build_downlink
from fedsim.comm.ledger import MessageSizes
from fedsim.comm.uplink import Blocks, build_uplink
from fedsim.config import AlgorithmConfig, ConfigError, SkewScoutControl, local_training
from fedsim.control.fixed import configured_knob, knob_name, local_settings, round_steps
from fedsim.control.skewscout import Controller
from fedsim.data.base import FederatedDataset
from fedsim.data.holdout import LocalHoldout
from fedsim.models import ModelFactory, Replica
from fedsim.privacy import build_privacy, build_secagg, noise_key
from fedsim.privacy.context import PrivacyContext
from fedsim.robust import build_attack, build_robust
from fedsim.runstore import RoundRow
from fedsim.sim.executors.base import ClientRecord, Executor
from fedsim.sim.executors.choice import build_executor, executor_kind
from fedsim.sim.executors.threads import choose_threads, step_flops
from fedsim.sim.persist import resume
from fedsim.sim.persist.kept import Saved
from fedsim.sim.rounds.candidate_loss import CandidateLoss
from fedsim.sim.rounds.cohort import dropped_clients
from fedsim.sim.rounds.coreset import ClientCoreset
from fedsim.sim.rounds.leaders import leaders_of
from fedsim.sim.rounds.record import RoundRecord, StateFootprint, charge_records, clock_metrics, knob_metrics
from fedsim.sim.rounds.scoring import evaluate_clients
from fedsim.sim.rounds.steps import ServerRound, Step, build_steps
from fedsim.sim.rounds.summary import Summary
from fedsim.sim.rounds.upload import UpdateStages
from fedsim.sim.run.context import RunContext
from fedsim.sim.run.settings import EngineSettings
from fedsim.sim.runtime.preflight import check_pool, warn_if_idle
from fedsim.sim.runtime.runtime_model import RuntimeModel
from fedsim.sim.runtime.scheduler import assign
from fedsim.sim.selection import SelectionContext, build_selector, told
from fedsim.sim.selection.durations import task_seconds
from fedsim.sim.server_stages import RowSpace, ServerStages, StageContext
from fedsim.sim.state.hand_off import hand_off
from fedsim.tasks import EvalResult, Task
from fedsim.tasks.custom import LossFn
from fedsim.traces.clock import EventClock
from fedsim.traces.rounds import StepLog, SynchronousRounds


class Engine(RunContext):
    """Builds a run from its config and executes it round by round on this rank of the pool.

    ``dataset`` may be passed in (benchmarks build one directly); otherwise it is built from ``cfg.data``.
    With ``resume=True`` the newest valid checkpoint in ``out_dir/checkpoints`` is restored first.
    """

    cfg: EngineSettings  # the sections a federated run reads (fedsim.config.RunConfig is one)

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
        if cfg.decentralised:
            raise ConfigError(
                "topology: a decentralised run is fedsim.decentralised.gossip.GossipEngine's (fedsim run picks it)"
            )
        super().__init__(cfg, out_dir, db_path, dataset, model, task, clients=self._clients)
        if cfg.devices < self.pool.world:
            raise ConfigError(f"devices={cfg.devices} is fewer than the {self.pool.world} ranks started")
        replica = self.replica
        self.global_state = replica.flat.clone()
        probe = self.test.x[:1] if len(self.test.x) else self.dataset.client(0).x[:1]  # what a step costs
        counted = cfg.threads is None and not self.accelerator.is_cuda
        flops = step_flops(replica.module, probe, cfg.algorithm.batch_size) if counted else None
        self.threads_note = choose_threads(cfg.threads, replica.numel, self.accelerator.is_cuda, self.pool.world, flops)
        self.algorithm = build_algorithm(cfg.algorithm, self.dataset.num_clients)
        self.leaders = leaders_of(self.algorithm)  # fedlgd's election, built only for an algorithm that elects
        self.server_step = ServerStep(cfg.server_optimizer, ServerOptimizerContext.of(replica.shapes, replica.n_params))
        sums = self.algorithm.sum_sizes(replica.numel, replica.n_params)
        own = StageContext(cfg.seed, self.dataset.num_clients, replica.n_params, replica.parameters)  # the stages:
        space = RowSpace(sums.get("delta", 0), self.accelerator.device, out_dir / f"stage-rows-{self.pool.rank}.f32")
        self.server_stages = ServerStages(cfg.server_stages, own, space, sums)  # rows where one reads them
        population, device, root = self.dataset.num_clients, self.accelerator.device, self.pool.is_root
        key = noise_key(cfg.privacy, cfg.seed, self.pool.broadcast, root)
        release = cfg.asynchronous.buffer if cfg.asynchronous.enabled else cfg.cohort_size  # a release's clients
        settings = (cfg.sampling, cfg.rounds, cfg.progress, key, cfg.clock.kind != "trace")  # the trace: unsampled
        private = PrivacyContext(cfg.seed, population, release, *settings)
        self.privacy = build_privacy(cfg.privacy, cfg.algorithm.kind, private, sums, self.global_state)  # None: not
        self.secagg = build_secagg(cfg.secagg, self.privacy, self.opt, cfg.seed, sums, device, root)  # private
        spill = out_dir / f"gathered-{self.pool.rank}.f32"  # the aggregation rule's rows past its memory budget
        rule = (cfg.aggregator, cfg.algorithm.kind, cfg.seed, sums, device, spill, root, self.dataset, self.task)
        self.robust = build_robust(*rule, cfg.attackers_warning())  # None: the weighted mean
        honest = out_dir / f"honest-{self.pool.rank}.f32"  # the honest rows an attack reads, past their budget
        self.attack = build_attack(cfg.attack, cfg.seed, self.dataset, sums.get("delta", 0), device, honest, root)
        if self.attack is not None and self.attack.poisons_data:  # label flips, backdoors: the clients' own data
            self.dataset = self.attack.poisoned(self.dataset, self.test_shard)
        blocks = Blocks(replica.shapes)  # the model's tensors in the flat vector, for per-tensor compressors
        self.uplink = build_uplink(cfg.uplink, cfg.control.knob, blocks, cfg.seed)  # None: dense
        if self.attack is not None and self.uplink is not None:  # an omniscient attacker's own compressor state
            self.attack.check_channel(self.uplink.stateful, self.pool.world)
        self.downlink = build_downlink(cfg.downlink, blocks, cfg.seed, self.global_state)
        self.knob = configured_knob(cfg.control, self.algorithm, self.uplink)  # the whole run's under fixed
        parts = (cfg.control, self.algorithm, self.dataset, cfg.seed, self.uplink)  # SkewScout turns the knob:
        self.control = Controller(*parts) if isinstance(cfg.control, SkewScoutControl) else None  # fixed: none runs
        if self.control is not None and self.pool.world > 1:
            raise ConfigError("control.kind=skewscout runs on one rank (its probes keep local models in memory)")
        self.sizes = MessageSizes.of(
            sums | {k: ROUND_SEGMENTS[k] for k in UPLOADED_ROUND_SEGMENTS},
            replica.numel + self.algorithm.broadcast_numel(replica.numel, replica.n_params),
            replica.numel,
        )
        self.seconds = task_seconds(self.opt, self.dataset, self.sizes.down, self.sizes.up, lambda: self.trace)
        clock, on_trace = cfg.clock, cfg.clock.kind == "trace" and not cfg.asynchronous.enabled  # rounds on its clock
        started = (population, cfg.cohort_size, clock.over_select, cfg.seed, self.seconds)
        ends = (clock.deadline_s, clock.max_draws, clock.retry_s)
        self.rounds = SynchronousRounds(self.trace, *started, *ends) if on_trace else None  # None: measured time
        online = self.rounds.clock.online_now if self.rounds else None  # the trace's: a filter every selector reads
        size = cfg.cohort_size + clock.over_select if on_trace else cfg.cohort_size  # the clients a round starts
        drawn = (cfg.seed, population, size, cfg.emulation.availability, cfg.sampling, self.dataset.n_samples)
        context = SelectionContext(*drawn, self.seconds, online, CandidateLoss(self))  # the probe: pow-d's losses
        self.selector = build_selector(cfg.selection, context)  # the same on every rank: it sees every record
        self.executor: Executor = self._derive(replica)
        self.my_devices = [d for d in range(cfg.devices) if d % self.pool.world == self.pool.rank]
        self.slowdown = cfg.emulation.slowdown or (1.0,) * cfg.devices
        self.runtime = RuntimeModel(cfg.devices, cfg.scheduler.window, cfg.scheduler.warmup)
        self.owner: dict[int, int] = {}  # client -> its state's device; grows with the clients seen: kept only
        self.moves_state = self.pool.world > 1 and cfg.state.backend == "memory"  # where states move (hand_off)
        self.last_federated: dict[str, float | int | str] | None = None
        self.steps: list[Step] = build_steps(self)  # the server's half, in its declared order
        if resume:
            self.resume()

    def _clients(self, dataset: FederatedDataset) -> FederatedDataset:
        """Clients keep part of their data back for federated evaluation when ``federated_eval.holdout`` is set."""
        held = self.cfg.federated_eval
        return LocalHoldout(dataset, held.holdout, self.cfg.seed) if held.enabled else dataset

    def _derive(self, replica: Replica) -> Executor:
        """Everything the engine derives from the config: whether clients keep state between rounds, and the
        executor that trains them (which weights clients and keeps optimiser state as the config says)."""
        cfg, uplink = self.cfg, self.uplink
        compressed = uplink is not None and uplink.stateful  # and a coreset: a client's subset, between choices
        keeps = (self.algorithm.stateful, self.opt.keeps_optimizer_state, compressed, cfg.coreset.enabled)
        self.stateful = any(keeps)  # clients carry state from round to round, in the store
        check_pool(cfg.checkpoint, cfg.state, self.pool.world, self.stateful)
        self.executor_kind = executor_kind(cfg.executor, cfg.coreset, self.algorithm, replica, self.task, self.dataset)
        settings = (cfg.executor, self.opt, cfg.state, cfg.seed)
        parts = (*settings, replica, self.algorithm, self.dataset, self.store, self.accelerator, self.task)
        coreset = ClientCoreset(cfg.coreset) if cfg.coreset.enabled else None
        rows = self.server_stages if self.server_stages.reads_rows else None  # your stages that read each update
        stages = UpdateStages(self.privacy, self.secagg, self.robust, self.attack, coreset, rows)
        return build_executor(self.executor_kind, *parts, stages)

    def reconfigure(self, algorithm: AlgorithmConfig) -> None:
        """Train with ``algorithm`` from the next round on: the algorithm is built anew from it with the old one's
        server state, and what the engine derived from the old settings (the clients' weights, whether they keep
        state, the executor) is derived again; the algorithm's name cannot change. A setting refused on the way
        leaves the run as it was."""
        if algorithm.kind != self.cfg.algorithm.kind:
            raise ConfigError(f"algorithm.kind: a run cannot change its algorithm ({self.cfg.algorithm.kind!r})")
        before = (self.cfg, self.algorithm, self.leaders, self.stateful, self.executor_kind)
        self.cfg = self.cfg.model_copy(update={"algorithm": algorithm})
        rebuilt = build_algorithm(algorithm, self.dataset.num_clients)
        rebuilt.load_state_dict(self.algorithm.state_dict())  # the server's state goes on (moments, variates)
        self.algorithm, self.leaders = rebuilt, leaders_of(rebuilt)
        try:
            self.executor = self._derive(self.executor.replica)
        except ConfigError:
            self.cfg, self.algorithm, self.leaders, self.stateful, self.executor_kind = before
            raise
        if self.control is not None:
            self.control.algorithm = rebuilt
        self.steps = build_steps(self)  # the server update and LGD's election hold the algorithm

    def started_run(self) -> None:
        warn_if_idle(self.cfg.emulation, self.cfg.cohort_size, self.dataset.num_clients)

    def round(self, r: int) -> RoundRow:
        """Run round ``r`` (0-based) on this rank; returns the round's row (written by rank 0)."""
        t0 = time.perf_counter()
        log, cohort, dropped = self._cohort(r)
        counted = self.withholds_samples  # under DP the plan goes by client count
        sizes = {cid: 1 if counted else self.dataset.n_samples(cid) for cid in cohort}  # the plan's, by count
        plan, predicted = assign(self.cfg.scheduler.kind, cohort, sizes, self.runtime, self.owner, self.slowdown)
        if self.stateful:  # clients whose state another rank holds: it moves to the rank that trains them now
            self.ledger.record_moved(hand_off(self.store, self.pool, plan, shared=self.cfg.state.backend == "disk"))
        # train in client order, whatever the plan: the local sum is then the same for every plan, and the
        # devices a rank emulates are interleaved in time, so machine noise hits them alike
        mine = sorted((cid, d) for d in self.my_devices for cid in plan[d] if cid not in dropped)
        context, knob = self._begin_stages(r, cohort, dropped)
        observer = self.control.observer if self.control else None  # SkewScout's probe keeps local models
        records = self.executor.train(context, mine, observer, self.uplink)
        t_train = time.perf_counter() - t0
        if self.pool.world > 1:
            self.store.flush()  # another rank may train these clients next round
        actual: list[float] = []  # each device's emulated seconds, once every rank's records are in
        sums, n_params = self.executor.local_sum.segments, self.executor.replica.n_params
        facts = (self.global_state, n_params, records, self.pool.all_reduce_, self.ledger, mine)
        at = ServerRound(r, context, sums, *facts, gathered=partial(self._gathered, context, actual, counted))
        for step in self.steps:  # the server's half, in the order the steps declare (fedsim.sim.rounds.steps)
            step.apply_(at)
        bytes_up, bytes_down = self.ledger.close_round()
        t_eval = time.perf_counter()
        evaluated = self._evaluate() if self.eval_due(r) else None
        federated = self._federated_eval([cid for cid, _ in mine]) if evaluated is not None else None
        self.last_federated = federated or self.last_federated
        t_eval = time.perf_counter() - t_eval
        n = len(at.records)
        record = RoundRecord(
            round=r,
            clients=at.records,
            planned=[len(p) for p in plan],
            predicted_s=predicted,
            actual_s=actual,
            cohort=len(cohort),
            dropped=len(dropped),
            bytes_up=bytes_up,
            bytes_down=bytes_down,
            bytes_uncompressed=self.sizes.dense * n,  # dense float32 messages, no probes
            bytes_up_uncompressed=self.sizes.up * n,
            wall_s=time.perf_counter() - t0,
            train_s=t_train,
            evaluated=evaluated,
            federated=federated,
            state=StateFootprint(len(self.store), self.store.memory_bytes(), self.store.disk_bytes()),
            lr=self.cfg.algorithm.client_lr(r),
            stages=self._stage_metrics(r, at, knob) | (clock_metrics(log, 0) if log else {}),
            clock=(log.clock_from, log.clock_to) if log else None,
            private=self.privacy.stored_statistics if self.privacy else None,
        )
        row = self._write(record, at, r)
        record.add_to(self.totals, time.perf_counter() - t0 - t_eval)
        return row

    def _cohort(self, r: int) -> tuple[StepLog | None, list[int], set[int]]:
        """Round ``r``'s cohort and who of it drops out: on the trace clock, whom the trace started (the
        selector choosing among the clients online, where it chooses) and who did not report; on measured
        time, the selector's cohort and the emulated dropouts. The trace's event log, or None."""
        cfg = self.cfg
        if self.rounds is None:
            cohort = self.selector.select(r)
            return None, cohort, dropped_clients(cfg.seed, r, cohort, cfg.emulation.dropout)
        chooses = not cfg.selection.samples_uniformly  # a uniform sample is the trace clock's own draw
        log = self.rounds.next_round(partial(self.selector.select, r) if chooses else None)
        cohort = sorted(task.cid for task in log.started)
        return log, cohort, set(cohort) - log.reported

    def _begin_stages(self, r: int, cohort: list[int], dropped: set[int]) -> tuple[RoundContext, float | None]:
        """Each stage's start of round ``r`` (the attackers, SecAgg+'s keys, the rule's and your stages' rows,
        SkewScout's knob or the compressor's streams, the downlink's cohort); the round's context as the
        clients train from it, and the knob they train with."""
        self.executor.begin_round()
        for stage in (self.attack, self.secagg, self.robust, self.server_stages):
            if stage is not None:
                stage.begin_round(r, cohort, dropped)
        if self.control is not None:  # SkewScout's knob into the compressor; a probe round's pairs
            self.control.begin_round(r)
        elif self.uplink is not None:
            self.uplink.begin_round(r, None)
        if self.downlink is not None:
            self.downlink.begin_round(cohort)
        start = self.global_state if self.downlink is None else self.downlink.model  # what the clients hold
        knob = self.control.value if self.control else self.knob  # this round's; a probe may change the next's
        return RoundContext(r, start, local_settings(self.opt, knob_name(self.cfg.control), knob)), knob

    def _gathered(self, context: RoundContext, actual: list[float], counted: bool, records: list[ClientRecord]) -> None:
        """Once every rank's records of the round are in: the selector's reports, each device's emulated
        seconds (into ``actual``; observed per client where ``counted``) and bytes, where each client's state
        now lives, the rule's view."""
        self.selector.observe(context.index, told(self.cfg.selection, records))  # what it declares it reads
        charged = (records, self.slowdown, self.runtime, self.ledger, self.sizes, self.downlink, counted)
        actual += charge_records(*charged)
        if self.stateful and self.moves_state:
            self.owner.update((rec.cid, rec.device) for rec in records)
        if self.robust is not None:  # the rule's view of the round: its model, FLTrust's root update
            self.robust.prepare_(context, self.executor.replica)

    def _stage_metrics(self, r: int, at: ServerRound, knob: float | None) -> dict[str, object]:
        """What the round's parts report: DP's epsilon and clip, SecAgg+'s, the attackers', your stages', the
        knob and SkewScout's probe, and what the server steps left (LGD's leaders)."""
        metrics: dict[str, object] = dict(self.privacy.round_metrics(r + 1)) if self.privacy else {}
        metrics |= self.secagg.round_metrics() if self.secagg else {}
        metrics |= self.attack.round_metrics() if self.attack else {}
        metrics |= self.server_stages.round_metrics()
        return metrics | knob_metrics(knob, at.probe, self.control is not None) | at.metrics

    def _write(self, record: RoundRecord, at: ServerRound, r: int) -> RoundRow:
        if self.runstore is None:
            return record.round_row(self.run_id)
        row = record.write(self.runstore, self.run_id, at.probe, knob_name(self.cfg.control))
        if resets := self.store.take_resets():  # counted where the dashboard and `fedsim runs` look
            self.runstore.add_round_metrics(self.run_id, r, {"state_resets": float(resets)})
        return row

    def announce(self) -> None:
        if self.privacy is not None:
            self.privacy.announce(self.cfg.progress)

    def stop_before(self, r: int) -> bool:
        """The step budget is spent, or the next round would spend more than ``max_epsilon`` (said on stderr)."""
        return self.spent(r) or bool(self.privacy and self.privacy.stop_before(r, self.pool.is_root))

    def steps_done(self, rounds: int) -> int:
        """The SGD steps counted against ``control.budget_steps`` after ``rounds`` rounds (SkewScout's count)."""
        knob = knob_name(self.cfg.control)
        return self.control.steps_done if self.control else rounds * round_steps(self.opt, knob, self.knob)

    def spent(self, rounds: int) -> bool:
        return self.cfg.control.budget_steps is not None and self.steps_done(rounds) >= self.cfg.control.budget_steps

    def final_model(self) -> Tensor:
        return self.global_state

    @property
    def opt(self) -> AlgorithmConfig:
        """The algorithm's settings, its clients' local training included (as :meth:`reconfigure` left them)."""
        return local_training(self.cfg.algorithm)

    @property
    def event_clock(self) -> EventClock | None:
        return self.rounds.clock if self.rounds else None

    def summary_fields(self, summary: Summary) -> dict[str, Any]:
        return summary.as_dict(skewscout=self.cfg.control.enabled) | self.clock_fields()

    def summary_parts(self) -> dict[str, Any]:
        totals, control, rounds, withheld = self.totals, self.control, self.next_round, self.withholds_samples
        return {
            "clients": self.dataset.num_clients,
            "virtual_s": totals["virtual_s"],
            "bytes_probe": control.probe_bytes if control else 0,
            "probe_s": control.probe_s if control else 0.0,
            "executor": self.executor_kind,
            "data_stall_share": totals["wait_s"] / max(totals["client_s"], 1e-12),
            "local_steps": self.steps_done(rounds),
            "federated_eval": {} if withheld else self.last_federated or {},
            "privacy": self.privacy.summary(rounds, self.global_state) if self.privacy else {},
            "secagg": self.secagg.summary() if self.secagg else {},
            "aggregator": self.robust.summary() if self.robust else {},
            "attack": self.attack.summary(self.uplink is not None) if self.attack else {},
            "bytes_up_uncompressed": int(totals["bytes_up_uncompressed"]),
        }

    def saved_parts(self) -> list[Saved]:
        return resume.saved_parts(self)

    def loaded(self, tensors: Mapping[str, Tensor], meta: Mapping[str, Any]) -> None:
        resume.load_saved(self, tensors, meta)

    @property
    def withholds_samples(self) -> bool:
        return self.privacy is not None and self.privacy.stored_statistics == "withheld"

    def released_again(self, rounds: list[int]) -> None:
        if self.privacy is not None:
            self.privacy.released_again(rounds)

    def parts(self) -> list[Saved]:
        """The parts with state a checkpoint keeps: DP's clip and releases, SecAgg+'s totals, the rule's centre,
        the attack's turns, the downlink's memory, SkewScout's policy, the selector's reports, your stages."""
        named = (("privacy", self.privacy), ("secagg", self.secagg), ("robust", self.robust), ("attack", self.attack))
        return [
            *(Saved(key, part) for key, part in named),
            Saved("downlink", self.downlink),
            Saved("control", self.control),
            Saved("selection", self.selector, "selection."),  # a selector, yours too, names its tensors plainly
            Saved("server_stages", self.server_stages),
            Saved("clock", self.rounds),  # the trace clock's rounds: its time, draws and events
        ]

    def _evaluate(self) -> EvalResult:
        return self.evaluate_model(self.global_state, self.attack)  # a backdoor's success rate too

    def _federated_eval(self, cids: list[int]) -> dict[str, float | int | str] | None:
        """Every rank scores the clients it trained on their held-out data (an audit's canaries are not clients
        of the task: they are left out); the scores are gathered."""
        cids = [cid for cid in cids if self.privacy is None or cid not in self.privacy.canaries]
        parts = (self.executor.replica, self.global_state, self.dataset, cids, self.task, self.cfg.eval_batch_size)
        personal = self.cfg.federated_eval.personal
        return evaluate_clients(self.algorithm, self.store, personal, *parts, self.pool, self.ledger)
