"""Running a config on one rank or on a pool of local ranks, and reading back what a run saved.

The builder reads the config through :class:`~fedsim.sim.run.settings.EngineSettings`, which a
:class:`~fedsim.config.RunConfig` satisfies: what the command line, a sweep and the Python API load, it runs."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from fedsim.algorithms import build_algorithm
from fedsim.asynchronous.engine import AsyncEngine
from fedsim.config import ConfigError, local_training
from fedsim.data.base import FederatedDataset
from fedsim.decentralised.gossip import GossipEngine
from fedsim.models import ModelFactory
from fedsim.sim.persist.interrupted import INTERRUPTED, RunInterrupted, signalled, stop_points, stopping_at_safe_points
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.summary import Summary, from_json
from fedsim.sim.run.settings import EngineSettings
from fedsim.sim.runtime.preflight import check_pool
from fedsim.tasks import Task
from fedsim.tasks.custom import LossFn


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
        except RunInterrupted as exc:
            if current_pool().is_root:
                (out_dir / INTERRUPTED).write_text(str(exc))


def execute(
    cfg: EngineSettings, out_dir: Path, db_path: Path, resume: bool = False, ranks: int | None = None
) -> Summary:
    """Run ``cfg`` on ``ranks`` local processes (default: one per device), or on the ranks torchrun started."""
    from fedsim.sim.runtime.pool import in_torchrun, init_from_env, launch, leave

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
    if not cfg.decentralised:  # a decentralised node stays on its rank: nothing to check
        keeps = local_training(cfg.algorithm).keeps_optimizer_state
        stateful = build_algorithm(cfg.algorithm, cfg.data.clients).stateful or keeps
        check_pool(cfg.checkpoint, cfg.state, ranks, stateful or compressor or cfg.coreset.enabled)
    note = out_dir / INTERRUPTED
    note.unlink(missing_ok=True)
    with stop_points(inner=False):  # a first signal is the ranks' to act on; a second stops this process at once
        launch(ranks, run_on_rank, cfg, out_dir, db_path, resume)
    if note.is_file():
        message = note.read_text()
        note.unlink()
        raise RunInterrupted(message)
    if signalled() and not (out_dir / "summary.json").is_file():  # a rank stopped before its round loop
        raise KeyboardInterrupt
    return from_json(json.loads((out_dir / "summary.json").read_text()))
