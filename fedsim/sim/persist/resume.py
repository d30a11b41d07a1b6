"""What a checkpoint of a federated run keeps beyond every run's (:meth:`fedsim.sim.run.context.RunContext.snapshot`),
and putting an engine back to it.

The global model, the algorithm's and the server optimiser's tensors, the runtime model and the clients' state
owners, and every step of the server's half with state (``Engine.parts``), as one list of
:class:`fedsim.sim.persist.kept.Saved` entries.
A checkpoint without a format (written before checkpoints had one: format 1) is read through the shims at the
end of this module until the config's format-1 horizon (:data:`fedsim.config.respell.FORMAT_1_UNTIL`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import torch
from torch import Tensor

from fedsim.config import AlgorithmConfig, StateConfig
from fedsim.control.skewscout import Controller
from fedsim.data.base import FederatedDataset
from fedsim.sim.executors.base import UPLINK_PREFIX, Executor
from fedsim.sim.persist.kept import JsonOf, Saved, StateTensors, TensorsOf, Value, Weights, load, prefixed
from fedsim.sim.runtime.pool import Pool
from fedsim.sim.runtime.runtime_model import RuntimeModel
from fedsim.sim.state.state_store import StateStore

SERVER_OPTIMIZER = "server_optimizer"


class Settings(Protocol):
    """The section of a run's config a federated checkpoint reads: where client state lives."""

    @property
    def state(self) -> StateConfig: ...


class Federated(Protocol):
    """What of a federated engine (:class:`fedsim.sim.rounds.engine.Engine`) a checkpoint keeps beyond every
    run's; named here so that this module needs nothing from the engine's."""

    @property
    def cfg(self) -> Settings: ...

    @property
    def opt(self) -> AlgorithmConfig:
        """The algorithm's settings, its clients' weighting included."""
        ...

    pool: Pool
    dataset: FederatedDataset
    global_state: Tensor
    runtime: RuntimeModel
    owner: dict[int, int]
    store: StateStore
    executor: Executor

    @property
    def algorithm(self) -> StateTensors: ...

    @property
    def server_step(self) -> StateTensors: ...

    def parts(self) -> list[Saved]:
        """Each step with state, with its key in meta.json (None there: the run has no such step) and the
        prefix its tensors' names take."""
        ...


def saved_parts(engine: Federated) -> list[Saved]:
    """Everything of a federated engine a checkpoint keeps beyond every run's, as one list: the model, the
    algorithm's and the server optimiser's tensors, the steps with state, the runtime model, the owners."""

    def owners(owner: Mapping[str, int]) -> None:
        engine.owner = {int(k): int(v) for k, v in owner.items()}

    def state_view(view: dict[str, list[int]]) -> None:
        if engine.pool.is_root:  # the store that reports the clients' state counts
            engine.store.restore_view(view)

    return [
        Saved("model", Weights(engine.global_state, "global"), always=True),
        Saved("algorithm", TensorsOf(engine.algorithm), "algorithm.", always=True),
        Saved(SERVER_OPTIMIZER, TensorsOf(engine.server_step), "server_optimizer.", always=True),
        *engine.parts(),
        Saved("runtime", JsonOf(engine.runtime), always=True),
        Saved("owner", Value(lambda: {str(k): v for k, v in engine.owner.items()}, owners), always=True),
        Saved("state_view", Value(engine.store.view, state_view)),  # absent: an older checkpoint's
    ]


def load_saved(engine: Federated, tensors: Mapping[str, Tensor], meta: Mapping[str, Any]) -> None:
    """Put ``engine``'s own state back from a checkpoint (after every run's, the client states included)."""
    legacy = meta.get("format", 1) == 1  # written before checkpoints had a format: the shims below apply
    load(saved_parts(engine), tensors, meta, skip=(SERVER_OPTIMIZER,) if legacy else ())
    if legacy:
        engine.server_step.load_state_dict(_server_step_state(tensors))
    engine.executor.store = engine.store  # a rank that rescanned the shared state directory has a new store
    if legacy and (engine.pool.is_root or engine.cfg.state.backend == "memory"):  # where the states were loaded
        _adopt_old_residuals(engine, tensors)


def _server_step_state(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The server optimiser's state; a checkpoint written before ``server_optimizer`` existed kept it with the
    algorithm's (FedAdam's ``m`` and ``v``, the server steps as ``server_round``), and one written when 1-bit
    LAMB was a compressor kept its server half as ``uplink_server`` (its steps are the server's)."""
    own = prefixed(tensors, "server_optimizer.")
    lamb = prefixed(tensors, "uplink_server.")
    if lamb:
        return {**own, **lamb, "t": own.get("steps", torch.tensor(0))}
    if own:
        return own
    old = prefixed(tensors, "algorithm.")
    steps = {"steps": old["server_round"]} if "server_round" in old else {}
    return {**{k: old[k] for k in ("m", "v") if k in old}, **steps}


def _adopt_old_residuals(engine: Federated, tensors: Mapping[str, Tensor]) -> None:
    """A checkpoint from before the top-k residuals lived in the state store kept them as ``control.residual.C``
    tensors, in units of the client's weight: they join their clients' states (unweighted, as a client's update
    rows are now), so resuming such a run loses no unsent update."""
    control = {k.removeprefix("control."): v for k, v in tensors.items() if k.startswith("control.")}
    for cid, residual in Controller.residuals_of(control).items():
        weight = engine.opt.client_weight(engine.dataset.n_samples(cid))
        engine.store.put(cid, {**(engine.store.get(cid) or {}), UPLINK_PREFIX + "residual": residual / weight})
