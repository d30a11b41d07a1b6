"""What every run has, whatever advances it, and the lifecycle written once over it.

A run's context is its config, output directory and run store, the pool of ranks and the accelerator, the
clients' data and the test shard, the task and the model replica, the client-state store, the byte ledger, the
checkpoint writer and the running totals. The lifecycle over it is: begin (the run store's row and config.json,
on rank 0), evaluate a model on the test set, record a callback's metrics, checkpoint when due and resume from
the newest checkpoint, the loop with its early stops and interrupts
(:mod:`fedsim.sim.run.loop`), the summary, and close.

What advances a run is its engine's: :class:`fedsim.sim.rounds.engine.Engine` (synchronous rounds),
:class:`fedsim.asynchronous.engine.AsyncEngine` (asynchronous server steps) and
:class:`fedsim.decentralised.gossip.GossipEngine` (gossip steps) subclass this class and give :meth:`round`,
:meth:`final_model`, what they keep in a checkpoint and what their summary adds.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from fedsim import __version__
from fedsim.comm.ledger import ByteLedger
from fedsim.data.base import FederatedDataset
from fedsim.data.build import build_dataset
from fedsim.models import ModelFactory, Replica
from fedsim.runstore import RoundRow, RunStore
from fedsim.sim.persist import checkpoint, kept
from fedsim.sim.persist.kept import JsonOf, Saved, Value
from fedsim.sim.persist.outputs import PROVIDED
from fedsim.sim.persist.period import CheckpointPeriod
from fedsim.sim.rounds.plan import round_plan
from fedsim.sim.rounds.record import record_callback_metrics
from fedsim.sim.rounds.scoring import evaluate_global
from fedsim.sim.rounds.summary import Summary, accuracy_by_clock, clock_summary, peak_rss_mb
from fedsim.sim.run import saved
from fedsim.sim.run.loop import run_rounds
from fedsim.sim.run.settings import RunSettings
from fedsim.sim.runtime.accelerator import Accelerator
from fedsim.sim.runtime.allocator import tune_malloc
from fedsim.sim.runtime.placement import place_data, placed_replica, placed_test
from fedsim.sim.runtime.pool import current_pool
from fedsim.sim.runtime.preflight import check_targets
from fedsim.sim.state.shared_dir import check_shared, check_state_dir
from fedsim.sim.state.state_store import build_state_store
from fedsim.tasks import EvalResult, Task, build_task
from fedsim.tasks.custom import LossFn
from fedsim.traces import Trace, build_trace
from fedsim.traces.clock import EventClock

CHECKPOINT_FORMAT = 2  # what a checkpoint's meta.json says; one without it is older (format 1): resume.py's shims
# running sums of a run, in seconds or samples; checkpoints from before client_s/wait_s read them as 0
TOTALS = (
    *("rounds_s", "train_s", "samples", "virtual_s", "checkpoint_s", "client_s", "wait_s", "best_accuracy"),
    "bytes_up_uncompressed",
)


class RunContext:
    """The shared run of ``cfg``: built on this rank of the pool, nothing written until the first round.

    ``clients`` turns the run's dataset into the clients that train (a decentralised run's blocks of clients, a
    federated run's local hold-out) before their data is placed on the device.
    """

    def __init__(
        self,
        cfg: RunSettings,
        out_dir: Path,
        db_path: Path,
        dataset: FederatedDataset | None,
        model: ModelFactory | nn.Module | None,
        task: Task | LossFn | None,
        clients: Callable[[FederatedDataset], FederatedDataset] = lambda data: data,
    ) -> None:
        self.started = time.perf_counter()  # as if never stopped: a resume moves it back by the time run before
        tune_malloc()
        self.cfg, self.out_dir, self.db_path = cfg, out_dir, db_path
        given = (("model", model), ("data", dataset), ("task", task))
        self.provided = tuple(name for name, value in given if value is not None)  # Python objects: not in config
        self.pool = current_pool()
        self.accelerator = Accelerator.resolve(cfg.accelerator)
        self.task = build_task(cfg.task, task)
        own = "data=" if dataset is not None else "data.factory" if cfg.data.dataset == "python" else None
        if dataset is None:  # else a benchmark's, the Python API's data=
            dataset = build_dataset(cfg.data, cfg.seed, cfg.task.kind == "regression")
        if own is not None:  # your data's labels, before anything is written or placed on the device
            check_targets(dataset, self.task, own)
        self.dataset = clients(dataset)
        self.placement = place_data(self.dataset, self.accelerator, cfg.data_on_device_mb * 2**20)
        self.test = placed_test(self.dataset, self.accelerator)
        self.test_shard = self.pool.shard(self.test)
        self.replica: Replica = placed_replica(cfg.model, cfg.seed, self.dataset, self.task, model, self.accelerator)
        self.store = build_state_store(cfg.state, out_dir / "state")
        self.ledger = ByteLedger()
        self.writer = checkpoint.BackgroundWriter(out_dir / "checkpoints", cfg.checkpoint.keep)
        self.period = CheckpointPeriod(cfg.checkpoint)  # when it checkpoints: as set, or chosen as it runs
        self.runstore: RunStore | None = None  # opened on rank 0 when the run starts: until then nothing is written
        self.run_id = ""
        self.begun = False
        self.stateful = False  # clients carry state between rounds, which another rank may train next
        self.executor_kind = "sequential"  # how clients (or nodes) train: sequential, or fused K at a time
        self.threads_note = ""
        self.totals = dict.fromkeys(TOTALS, 0.0)
        self.callback_metrics: dict[str, float] = {}  # the latest value of each metric a callback recorded
        self.last_eval: EvalResult | None = None
        self.next_round = 0
        self.stopped = False  # by the caller's after_round, before cfg.rounds

    # ------------------------------------------------------------------------------------- what advances it

    def round(self, r: int) -> RoundRow:
        """Run round (or server step, or gossip step) ``r`` on this rank; returns its row (written by rank 0)."""
        raise NotImplementedError

    def final_model(self) -> Tensor:
        """The model the run reports and saves: the global model, or the nodes' average."""
        raise NotImplementedError

    def saved_parts(self) -> list[Saved]:
        """The engine's own parts a checkpoint keeps (fedsim.sim.persist.kept), beside every run's."""
        raise NotImplementedError

    def loaded(self, tensors: Mapping[str, Tensor], meta: Mapping[str, Any]) -> None:
        """What the engine does once every part is back from a checkpoint (an older checkpoint's shims)."""

    def _last_eval_state(self) -> dict[str, Any] | None:
        return asdict(self.last_eval) if self.last_eval else None

    @property
    def withholds_samples(self) -> bool:
        """Whether the clients' sample counts, and so the run's sample total, are withheld (DP)."""
        return False

    def released_again(self, rounds: list[int]) -> None:
        """Rounds a resume trains again that the run released before it stopped (the run store's rows after the
        checkpoint): nothing to do unless a part accounts its releases (DP under a system noise seed)."""

    def run_parts(self) -> list[Saved]:
        """What every run's checkpoint keeps: the ledger, the totals, the wall seconds so far (a resumed run's
        go on from there) and the last evaluation."""

        def totals(saved: Mapping[str, float]) -> None:
            self.totals = {**dict.fromkeys(self.totals, 0.0), **{k: float(v) for k, v in saved.items()}}

        def wall(saved: float) -> None:
            self.started = time.perf_counter() - float(saved)

        def last_eval(saved: Mapping[str, Any] | None) -> None:
            self.last_eval = EvalResult(**saved) if saved else None

        return [
            Saved("ledger", JsonOf(self.ledger), always=True),
            Saved("totals", Value(lambda: self.totals, totals), always=True),
            Saved("wall_s", Value(lambda: time.perf_counter() - self.started, wall)),  # absent: an old one's
            Saved("last_eval", Value(self._last_eval_state, last_eval), always=True),
        ]

    def summary_parts(self) -> dict[str, Any]:
        """The engine's own fields of :class:`Summary` (clients, executor, virtual seconds, its stages')."""
        raise NotImplementedError

    def announce(self) -> None:
        """Lines printed (rank 0) before the first round."""

    def stop_before(self, r: int) -> bool:
        """Whether the run ends before round ``r`` for its own reasons (said on stderr)."""
        return self.spent(r)

    def spent(self, rounds: int) -> bool:
        """Whether a budget of the run is spent after ``rounds`` rounds (none by default)."""
        return False

    def summary_fields(self, summary: Summary) -> dict[str, Any]:
        """summary.json's fields."""
        return summary.as_dict(skewscout=False) | self.clock_fields()

    # ------------------------------------------------------------------------------------- the clock

    @cached_property
    def trace(self) -> Trace:
        """The run's population trace (``clock.trace``), built when first read."""
        return build_trace(self.cfg.clock.trace, self.cfg.seed)

    @property
    def event_clock(self) -> EventClock | None:
        """The trace clock the run reads (None: measured time, or none)."""
        return None

    def clock_fields(self) -> dict[str, Any]:
        """summary.json's ``clock`` on the trace clock: its seconds, accuracy against them, the time to
        ``clock.target_accuracy``, the trace; nothing on measured time."""
        if self.event_clock is None:
            return {}
        curve = accuracy_by_clock(self.runstore.rounds(self.run_id) if self.runstore else [])
        return {"clock": clock_summary(curve, self.event_clock.now, self.cfg.clock.target_accuracy, self.trace)}

    # ------------------------------------------------------------------------------------- the lifecycle

    def _begin(self) -> None:
        """Start the run in the run store (rank 0) and agree on its id: the first round, so building writes nothing."""
        if self.begun:
            return
        self.begun = True
        check_state_dir(self.pool, self.cfg.state, self.out_dir, self.stateful)  # before the run store: one line
        self.period.cannot(self.not_on_root(), self.pool.is_root)  # a run on auto that takes none says so now
        if self.pool.is_root and self.runstore is None:
            self.runstore = RunStore(self.db_path)
            cfg = self.cfg
            self.run_id = self.runstore.start_run(cfg.name, "simulation", cfg.model_dump(mode="json"), cfg.rounds)
            self.out_dir.mkdir(parents=True, exist_ok=True)
            (self.out_dir / "config.json").write_text(json.dumps(cfg.model_dump(mode="json"), indent=2) + "\n")
            if self.provided:  # what a resume must be given again: the config does not hold them
                (self.out_dir / PROVIDED).write_text(json.dumps({"provided": list(self.provided)}) + "\n")
            self.started_run()
        self.run_id = self.pool.broadcast(self.run_id)

    def run_round(self, r: int) -> RoundRow:
        """Round ``r`` (0-based) with what the loop owns around it: the run begun, the engine's round, the next
        round's index, and a checkpoint when one is due. Every engine's ``round`` is the round alone."""
        self._begin()
        row = self.round(r)
        self.next_round = r + 1
        self.checkpoint_if_due(r)
        return row

    def started_run(self) -> None:
        """What rank 0 says once the run has started in the run store (nothing by default)."""

    def run(self, after_round: Callable[[RoundRow], bool | None] | None = None) -> Summary:
        """All remaining rounds, then ``summary.json`` and ``model.safetensors`` (rank 0); a failure marks the run
        failed and re-raises. ``after_round(row)`` runs after each round; returning True stops the run there."""
        return run_rounds(self, after_round)

    def resume(self) -> None:
        """Put the run back to the newest complete checkpoint in its output directory (every rank calls this):
        every run's parts and the engine's own (:meth:`saved_parts`), one container."""
        pool, cfg = self.pool, self.cfg
        if pool.is_root:
            saved.check_resumable(self.out_dir, self.db_path)  # before anything is touched
        self.runstore = RunStore(self.db_path) if pool.is_root else None
        if pool.is_root:
            saved.clear_cut_writes(cfg.state, self.out_dir)
        remedy = "a resume on several machines reads rank 0's checkpoints on every rank: --out on a shared filesystem"
        check_shared(pool, self.out_dir / "checkpoints", "--out", remedy)
        loaded = saved.newest_checkpoint(self.out_dir)
        torch.set_rng_state(loaded.tensors["rng.torch"])
        meta: dict[str, Any] = loaded.meta
        pool.broadcast(None)  # barrier: nobody reads the state directory while rank 0 rewrites it
        if pool.is_root or cfg.state.backend == "memory":
            self.store.load_snapshot(loaded.path / "state")
        pool.broadcast(None)
        if not pool.is_root and cfg.state.backend == "disk":  # rescan the shared directory
            self.store = build_state_store(cfg.state, self.out_dir / "state")
        kept.load([*self.run_parts(), *self.saved_parts()], loaded.tensors, meta)
        self.loaded(loaded.tensors, meta)
        # the rounds the crashed run wrote after the checkpoint were released: they are trained again now
        released = [row.round for row in self.runstore.rounds(meta["run_id"], loaded.round)] if self.runstore else []
        self.released_again(pool.broadcast(released))
        self.next_round = loaded.round + 1
        self.run_id = meta["run_id"]
        saved.mark_resumed(self.runstore, self.run_id, loaded.round, cfg)

    def snapshot(self, r: int) -> checkpoint.Snapshot:
        """Everything rank 0 needs to resume after round ``r``, tensors copied to the host now: the RNG, the
        round, the ledger, the totals, the wall seconds so far, the last evaluation, the client-state store, and
        the engine's own (:meth:`saved_parts`), one container (fedsim.sim.persist.kept)."""
        frozen = self.store.freeze()  # first: the store's view is taken once every state is written
        tensors, meta = kept.save([*self.run_parts(), *self.saved_parts()])
        meta |= {"format": CHECKPOINT_FORMAT, "round": r, "run_id": self.run_id}
        tensors = {**tensors, "rng.torch": torch.get_rng_state()}
        return checkpoint.Snapshot(r, tensors, meta, frozen)

    def checkpoint_interrupted(self) -> None:
        """As the run stops between rounds (a pool's ranks after the same one, each calling this), checkpoint the
        last finished round unless a checkpoint holds it already; one that rank 0 cannot write whole (see
        :meth:`not_on_root`) or that fails is one warning, the run stopping anyway."""
        r, directory = self.next_round - 1, self.out_dir / "checkpoints"
        held = self.pool.is_root and (directory / f"{checkpoint.PREFIX}{r:06d}").is_dir()
        if r < 0 or self.pool.broadcast(held):  # rank 0's answer: the directory may be rank 0's alone
            return
        unheld = self.not_on_root()
        why = f"rank 0 does not hold {unheld}" if unheld else ""
        if not unheld and self.pool.world > 1:
            self.gather_for_checkpoint()
        if self.pool.is_root and not why:
            try:
                checkpoint.write(self.snapshot(r), directory, self.cfg.checkpoint.keep)
            except Exception as exc:
                why = str(exc)
        if self.pool.is_root and why:
            print(f"fedsim: warning: round {r + 1} was not checkpointed as the run stopped: {why}", file=sys.stderr)
        self.pool.broadcast(None)  # a barrier: every rank's closing line then names the checkpoint

    def not_on_root(self) -> str:
        """What of the run rank 0's checkpoint cannot hold ('' : nothing; a run of one rank holds all): in a pool,
        the client states other ranks keep in memory."""
        if self.pool.world > 1 and self.stateful and self.cfg.state.backend == "memory":
            return "the client states the other ranks keep in memory (state.backend=disk checkpoints a pool)"
        return ""

    def gather_for_checkpoint(self) -> None:
        """Bring onto rank 0 what other ranks of a pool hold and a checkpoint needs (a collective: every rank
        calls it, in a pool only); nothing by default, the disk and the all-reduced model being shared already."""

    @property
    def resume_command(self) -> str:
        """How to go on with this run: ``fedsim resume OUT``, or Python's for a run of Python objects."""
        if not self.provided:
            return f"fedsim resume {self.out_dir}"
        given = "".join(f", {name}=..." for name in self.provided)
        return f"fedsim.Simulation.resume({str(self.out_dir)!r}{given}).run()"

    def checkpoint_if_due(self, r: int) -> None:
        """Hand rank 0's snapshot after round ``r`` to the background writer when one is due (:attr:`period`;
        never after the last round, nor after a spent budget); its cost to the loop counts in ``checkpoint_s``.
        Every rank calls this: in a pool the others wait until rank 0 has frozen round ``r``'s client files, which
        they would otherwise begin to overwrite with the next round's in a directory they share."""
        last = r == self.cfg.rounds - 1 or self.spent(r + 1)
        if last or not self.period.due(r, self.not_on_root(), self.pool.is_root):
            return
        t0 = time.perf_counter()
        if self.pool.world > 1:
            self.gather_for_checkpoint()
        if self.pool.is_root:
            self.writer.submit(self.snapshot(r))
        self.period.agree(r, t0, self.writer, self.pool)  # a barrier, with auto's next period (one rank: nothing)
        self.totals["checkpoint_s"] += time.perf_counter() - t0

    def evaluate_model(self, model: Tensor, attack: Any = None) -> EvalResult:
        """``model`` on the test set, every rank scoring its shard (a backdoor's success too, with ``attack``)."""
        parts = (self.replica, model, self.test_shard, self.cfg.eval_batch_size, self.task)
        self.last_eval = evaluate_global(*parts, self.pool, self.ledger, attack)
        if math.isfinite(self.last_eval.accuracy):
            self.totals["best_accuracy"] = max(self.totals["best_accuracy"], self.last_eval.accuracy)
        return self.last_eval

    def _evaluate(self) -> EvalResult:
        """The run's model now, on the test set."""
        return self.evaluate_model(self.final_model())

    def eval_due(self, r: int) -> bool:
        """Whether round ``r`` ends with an evaluation: every ``eval_every`` rounds, the last one, a spent budget."""
        every = self.cfg.eval_every
        return (every > 0 and (r + 1) % every == 0) or r == self.cfg.rounds - 1 or self.spent(r + 1)

    def record_metrics(self, row: RoundRow, metrics: Mapping[str, float]) -> None:
        """Add ``metrics`` (what a callback returned after round ``row.round``) to that round's row in the run
        store and, latest value by name, to summary.json's ``callback_metrics``; a name the round already
        records, or a value that is not a finite number, is one ConfigError."""
        record_callback_metrics(row, metrics, self.callback_metrics, self.runstore, self.run_id)

    def summary(self) -> Summary:
        """The :class:`Summary` of the run so far."""
        final, totals = self.last_eval, self.totals
        samples = None if self.withholds_samples else int(totals["samples"])
        fields: dict[str, Any] = {
            "run_id": self.run_id,
            "rounds": self.next_round,
            "final_accuracy": final.accuracy if final else float("nan"),
            "final_loss": final.loss if final else float("nan"),
            "wall_s": time.perf_counter() - self.started,
            "rounds_s": totals["rounds_s"],
            "train_s": totals["train_s"],
            "samples": samples,
            "samples_per_s": None if samples is None else samples / max(totals["rounds_s"], 1e-9),
            "bytes_up": self.ledger.total_up,
            "bytes_down": self.ledger.total_down,
            "peak_rss_mb": peak_rss_mb(),
            "devices": self.cfg.devices,
            "bytes_moved": self.ledger.moved,
            "checkpoint_s": totals["checkpoint_s"],
            "checkpoint": self.period.record(),
            "accelerator": self.accelerator.name,
            "task": self.task.name,
            "final_metrics": final.metrics() if final else {},
            "algorithm": self.cfg.algorithm.kind,
            "dataset": self.cfg.data.dataset,
            "best_accuracy": totals["best_accuracy"] if final is not None else float("nan"),
            "version": __version__,
            "threads": torch.get_num_threads(),
            "callback_metrics": dict(self.callback_metrics),
            "stages": [stage.as_dict() for stage in round_plan(self.cfg)],
        }
        return Summary(**(fields | self.summary_parts()))

    def close(self) -> None:
        self.store.close()
        if self.runstore is not None:
            self.runstore.close()
