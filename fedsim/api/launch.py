"""Running a config on one rank or on a pool of local ranks, and reading back what a run saved.

The builder reads the config through :class:`~fedsim.sim.run.settings.EngineSettings`, which a
:class:`~fedsim.config.RunConfig` satisfies: what the command line, a sweep and the Python API load, it runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from fedsim.algorithms import build_algorithm
from fedsim.asynchronous.engine import AsyncEngine
from fedsim.config import ConfigError, local_training
from fedsim.data.base import FederatedDataset
from fedsim.decentralised.gossip import GossipEngine, check_one_rank
from fedsim.models import ModelFactory
from fedsim.sim.persist.diverged import Diverged
from fedsim.sim.persist.failed import RunFailed
from fedsim.sim.persist.interrupted import INTERRUPTED, RunInterrupted, signalled, stop_points, stopping_at_safe_points
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.summary import Summary, from_json
from fedsim.sim.run.settings import EngineSettings
from fedsim.sim.runtime.preflight import check_pool
from fedsim.tasks import Task
from fedsim.tasks.custom import LossFn

if TYPE_CHECKING:
    from fedsim.sim.runtime.pool import RankLost


def final_weights(out_dir: Path) -> torch.Tensor:
    """The global model a finished run saved in ``out_dir/model.safetensors``."""
    from safetensors.torch import load_file

    return load_file(out_dir / "model.safetensors")["global"]


def build_engine(
    cfg: EngineSettings,
    out_dir: Path,
    db_path: Path,
    resume: bool = False,
    dataset: FederatedDataset | None = None,
    model: ModelFactory | nn.Module | None = None,
    task: Task | LossFn | None = None,
) -> Engine | GossipEngine:
    """The federated round loop, the decentralised one when the run has a topology, or the asynchronous server
    when ``asynchronous.kind`` is set; ``dataset``, ``model``
    and ``task`` are the Python API's own, when given."""
    kind = GossipEngine if cfg.decentralised else AsyncEngine if cfg.asynchronous.enabled else Engine
    return kind(cfg, out_dir=out_dir, db_path=db_path, resume=resume, dataset=dataset, model=model, task=task)


def run_on_rank(cfg: EngineSettings, out_dir: Path, db_path: Path, resume: bool) -> None:
    """Entry point of one rank of a pool started by :func:`fedsim.sim.runtime.pool.launch`. A signal stops the
    ranks together after a round (:mod:`fedsim.sim.persist.interrupted`); rank 0 leaves the line that says where
    and how to go on in ``out_dir/.interrupted`` for the parent to raise."""
    from fedsim.sim.runtime.pool import current_pool

    with stopping_at_safe_points():
        try:
            build_engine(cfg, out_dir, db_path, resume).run()
        except (RunInterrupted, Diverged, RunFailed, ConfigError) as exc:  # every rank ends so: rank 0 says it once
            if current_pool().is_root:
                (out_dir / INTERRUPTED).write_text(json.dumps({"ended": type(exc).__name__, "message": str(exc)}))


def _lost(lost: RankLost, out_dir: Path, db_path: Path, resume: bool) -> str:
    """Mark the run of a pool that lost a rank failed (rank 0 cannot, when it is the one lost, and its process
    group is gone); the line that says which rank and how."""
    from fedsim.runstore import RunStore
    from fedsim.runstore.liveness import run_of
    from fedsim.sim.run.saved import checkpointed_run

    run_id = run_of(db_path, lost.root_pid) or (checkpointed_run(out_dir) if resume else None)
    if run_id is not None and db_path.is_file():
        with RunStore(db_path) as store:
            info = store.get_run(run_id)
            if info is not None and info.status != "finished":
                store.finish_run(run_id, "failed", None)
    return f"{lost}" + (f" (run {run_id})" if run_id else "")


def execute(
    cfg: EngineSettings, out_dir: Path, db_path: Path, resume: bool = False, ranks: int | None = None
) -> Summary:
    """Run ``cfg`` on ``ranks`` local processes (default: one per device), or on the ranks torchrun started."""
    from fedsim.sim.runtime.pool import RankLost, in_torchrun, init_from_env, launch, leave

    if in_torchrun():
        init_from_env()
        try:
            summary = build_engine(cfg, out_dir, db_path, resume).run()
        except ConfigError:  # every rank refuses together (fedsim.sim.state.shared_dir): leave together, or gloo may
            leave(together=True)  # abort a rank whose peer has gone
            raise
        leave(together=True)
        return summary
    ranks = cfg.devices if ranks is None else ranks
    if ranks > cfg.devices:
        raise ConfigError(f"--ranks {ranks} exceeds devices={cfg.devices}")
    if ranks == 1:
        return build_engine(cfg, out_dir, db_path, resume).run()
    topk = cfg.control.knob is not None and cfg.control.knob.name == "topk"  # residuals are client state
    compressor = topk or cfg.uplink.stateful  # error feedback, warm-start factors: client state
    if cfg.decentralised:  # a node stays on its rank: only where the checkpoint is written
        check_one_rank(cfg, ranks)
    else:
        keeps = local_training(cfg.algorithm).keeps_optimizer_state
        stateful = build_algorithm(cfg.algorithm, cfg.data.clients).stateful or keeps
        check_pool(cfg.checkpoint, cfg.state, ranks, stateful or compressor or cfg.coreset.enabled)
    note = out_dir / INTERRUPTED
    note.unlink(missing_ok=True)
    with stop_points(inner=False):  # every signal goes on to the ranks, which stop together; this one waits
        try:
            launch(ranks, run_on_rank, cfg, out_dir, db_path, resume)
        except RankLost as lost:
            raise RunFailed(_lost(lost, out_dir, db_path, resume)) from None
    if note.is_file():
        said = json.loads(note.read_text())
        note.unlink()
        ends: dict[str, Callable[[str], BaseException]] = {
            "Diverged": Diverged.said,
            "RunFailed": RunFailed,
            "ConfigError": ConfigError,
        }
        raise ends.get(said["ended"], RunInterrupted)(said["message"])
    if signalled() and not (out_dir / "summary.json").is_file():  # a rank stopped before its round loop
        raise KeyboardInterrupt
    return from_json(json.loads((out_dir / "summary.json").read_text()))
