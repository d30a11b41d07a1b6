"""Which executor trains a run's clients, and building it from the config.

The engine derives the executor, like everything else it derives from the config, in one place, so that a
setting changed between rounds (:meth:`fedsim.sim.engine.Engine.reconfigure`) takes effect from the next one.
"""

from __future__ import annotations

from fedsim.algorithms.base import Algorithm
from fedsim.config import ConfigError, RunConfig
from fedsim.data.base import FederatedDataset
from fedsim.models.replica import Replica
from fedsim.sim.accelerator import Accelerator
from fedsim.sim.executor import Executor
from fedsim.sim.fused import FusedExecutor, why_not_fused
from fedsim.sim.sequential import SequentialExecutor
from fedsim.sim.state_store import StateStore
from fedsim.sim.upload import NO_STAGES, UpdateStages
from fedsim.tasks import CLASSIFICATION, Task


def executor_kind(cfg: RunConfig, algorithm: object, replica: Replica, task: Task = CLASSIFICATION) -> str:
    """``sequential`` or ``fused``: what ``cfg.executor.kind`` asks for, ``auto`` resolved; a ConfigError when
    fused was asked for and cannot be."""
    reason = why_not_fused(algorithm, replica, task)
    if cfg.coreset.enabled:
        reason = f"coreset.kind={cfg.coreset.kind} trains on a weighted subset, which only sequential does yet"
    if cfg.executor.kind == "auto":
        return "sequential" if reason else "fused"
    if cfg.executor.kind == "fused" and reason:
        raise ConfigError(f"executor.kind=fused: {reason}")
    return cfg.executor.kind


def build_executor(
    kind: str,
    cfg: RunConfig,
    replica: Replica,
    algorithm: Algorithm,
    dataset: FederatedDataset,
    store: StateStore,
    accelerator: Accelerator,
    task: Task,
    stages: UpdateStages = NO_STAGES,
) -> Executor:
    """The ``kind`` executor (:func:`executor_kind`) over the rank's one ``replica``, weighting clients and
    keeping their optimiser state as ``cfg.algorithm`` says now; under DP every client weighs 1 (DP-FedAvg: a
    client's clipped update is its whole contribution); each client's rows pass through ``stages``."""
    opt = cfg.algorithm
    weight = _uniform if stages.privacy is not None else opt.client_weight
    parts = (replica, algorithm, dataset, store, cfg.seed, weight, accelerator)
    if kind == "fused":
        return FusedExecutor(*parts, cfg.executor.clients, task, cfg.state.in_flight, stages)
    return SequentialExecutor(*parts, task, opt.keeps_optimizer_state, cfg.state.in_flight, stages)


def _uniform(n_samples: int) -> float:
    return 1.0
