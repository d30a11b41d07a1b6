"""One run loop for every engine: begin, the rounds, a stop before a round (a privacy budget, SkewScout's end)
or after one (a callback), a signal or a damaged state file, the final evaluation of the model the run stops
with, and the summary with the model saved (and its adapter in peft's format, where it has one).

:class:`Looped` names what of :class:`fedsim.sim.run.context.RunContext` the loop reads (this module cannot
import it: the context's ``run`` calls the loop).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from torch import Tensor

from fedsim.comm.ledger import ByteLedger
from fedsim.config import AlgorithmBase, TrackingConfig
from fedsim.models.adapters import save_adapter
from fedsim.models.replica import Replica
from fedsim.runstore import RoundRow, RunStore
from fedsim.sim.persist.checkpoint import BackgroundWriter
from fedsim.sim.persist.diverged import Diverged
from fedsim.sim.persist.interrupted import RunInterrupted, shielded, stop_point, stop_points
from fedsim.sim.rounds.progress import RoundProgress, stage_figures
from fedsim.sim.rounds.summary import Summary
from fedsim.sim.runtime.pool import Pool
from fedsim.sim.state.state_files import write_atomic, write_text_atomic
from fedsim.sim.state.state_store import StateDamaged
from fedsim.tasks import EvalResult
from fedsim.tracking import Tracker, open_trackers, round_metrics

AfterRound = Callable[[RoundRow], bool | None]


class LoopSettings(Protocol):
    """What of a run's config the loop reads: the rounds, whether to show progress, the trackers to open, the
    clients' learning rate, and the whole config as JSON for the trackers."""

    @property
    def rounds(self) -> int: ...

    @property
    def progress(self) -> bool: ...

    @property
    def tracking(self) -> TrackingConfig: ...

    @property
    def algorithm(self) -> AlgorithmBase: ...

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


class Looped(Protocol):
    @property
    def cfg(self) -> LoopSettings: ...

    pool: Pool
    replica: Replica  # the model's module: an adapter is exported from it
    writer: BackgroundWriter
    ledger: ByteLedger  # the bytes so far, for the progress line
    runstore: RunStore | None
    run_id: str
    out_dir: Path
    next_round: int
    last_eval: EvalResult | None
    totals: dict[str, float]
    threads_note: str
    stopped: bool

    def _begin(self) -> None: ...

    def run_round(self, r: int) -> RoundRow: ...

    def _evaluate(self) -> EvalResult: ...

    def announce(self) -> None:
        """Lines printed (rank 0) before the first round."""

    def checkpoint_interrupted(self) -> None:
        """Checkpoint the last finished round, if none holds it, as a run stops between rounds."""

    @property
    def resume_command(self) -> str:
        """How a user goes on with this run: ``fedsim resume``, or Python's for a run of Python objects."""
        ...

    def stop_before(self, r: int) -> bool:
        """Whether the run ends before round ``r`` (its own reasons, said on stderr by the engine)."""
        ...

    def summary(self) -> Summary: ...

    def final_model(self) -> Tensor: ...

    def summary_fields(self, summary: Summary) -> dict[str, Any]: ...

    def close(self) -> None: ...


def run_rounds(engine: Looped, after_round: AfterRound | None = None) -> Summary:
    """All remaining rounds of ``engine``, then ``summary.json`` and ``model.safetensors`` (rank 0); a failure
    marks the run failed and re-raises; a signal or a damaged state file marks it interrupted and raises
    :class:`RunInterrupted`, whose line names the checkpoint to resume from. ``after_round(row)`` runs after
    each round; returning True stops the run there. A run that stops early reports the model it stopped with,
    evaluated."""
    engine._begin()
    cfg, pool = engine.cfg, engine.pool
    trackers: list[Tracker] = []
    between = False  # the model, states and RNG are the last finished round's: a checkpoint may hold them
    if pool.is_root and cfg.tracking.enabled:
        config = cfg.model_dump(mode="json")
        trackers = open_trackers(cfg.tracking, engine.out_dir, engine.run_id, config, engine.next_round)
    try:
        if cfg.progress and pool.is_root:
            print(engine.threads_note, flush=True)
        if pool.is_root:
            engine.announce()
        # one process stops at its next safe point; the ranks of a pool after the same round, agreed at its start
        agree = pool.any_rank if pool.world > 1 else None
        with (
            RoundProgress(cfg.rounds, cfg.progress and pool.is_root, pool.is_root) as progress,
            stop_points(inner=pool.world == 1),
        ):
            progress.update(engine.next_round, engine.last_eval, 0.0)
            row: RoundRow | None = None
            between = True
            for r in range(engine.next_round, cfg.rounds):
                if engine.stop_before(r):
                    if row is None or row.test_accuracy is None:  # final_accuracy is the saved model's
                        engine._evaluate()
                    break
                stop_point(agree=agree)
                between = False
                row = engine.run_round(r)
                between = True
                samples = engine.totals["samples"]  # 0 where DP withholds the clients' sample counts
                rate = samples / max(engine.totals["rounds_s"], 1e-9) if samples else None  # evaluation out
                metrics = round_metrics(row)
                figures = stage_figures(metrics, engine.ledger.total_up)  # the run's bytes, a resume's too
                progress.update(r + 1, engine.last_eval, rate, cfg.algorithm.client_lr(r), figures)
                stop = after_round is not None and after_round(row)
                for tracker in trackers:  # after the callbacks: their metrics are the round's too
                    tracker.log(r + 1, round_metrics(row) if after_round is not None else metrics)
                if stop:
                    engine.stopped = True
                    if row.test_accuracy is None:  # the summary reports the model it stopped with
                        engine._evaluate()
                    break
        engine.writer.wait()
    except (KeyboardInterrupt, StateDamaged) as exc:  # Ctrl-C, SIGTERM as the command line turns it, a bad file
        with shielded():  # more signals now would cut the interrupt checkpoint short: counted, not raised
            engine.writer.settle()  # a checkpoint being written: the resume line names it
            if between and not isinstance(exc, StateDamaged):
                engine.checkpoint_interrupted()
            if engine.runstore is not None:
                engine.runstore.finish_run(engine.run_id, "interrupted", None)
            _close(trackers, None)
            engine.close()
            damaged = exc if isinstance(exc, StateDamaged) else None
            where = (engine.run_id, engine.next_round, engine.out_dir, damaged, engine.resume_command)
            stopped = RunInterrupted.after(*where)
        raise stopped from None
    except BaseException as exc:
        with shielded():
            if engine.runstore is not None:  # a model no longer finite is its own end, not a machine's failure
                status = "diverged" if isinstance(exc, Diverged) else "failed"
                engine.runstore.finish_run(engine.run_id, status, None)
            _close(trackers, None)
            engine.close()
        raise
    with shielded():  # the run is done: a signal now does not leave it half-saved
        summary = engine.summary()
        if engine.runstore is not None:
            engine.out_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(engine.out_dir / "model.safetensors", {"global": engine.final_model().to("cpu")})
            save_adapter(engine.replica.module, engine.final_model(), engine.out_dir)  # peft's files, with one
            fields = engine.summary_fields(summary)
            write_text_atomic(engine.out_dir / "summary.json", json.dumps(fields, indent=2, allow_nan=False) + "\n")
            engine.runstore.finish_run(engine.run_id, "finished", fields)
            _close(trackers, fields)
        engine.close()
    return summary


def _close(trackers: list[Tracker], fields: dict[str, Any] | None) -> None:
    for tracker in trackers:
        tracker.close(fields)
