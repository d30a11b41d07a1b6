"""What a checkpoint of a federated run keeps beyond every run's (:meth:`fedsim.sim.run.context.RunContext.snapshot`),
and putting an engine back to it.

The global model, the algorithm's and the server optimiser's tensors, the runtime model and the clients' state
owners, and every step of the server's half with state (``Engine.parts``) under one convention (:class:`Kept`).
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
from fedsim.sim.runtime.pool import Pool
from fedsim.sim.runtime.runtime_model import RuntimeModel
from fedsim.sim.state.state_store import StateStore


class Kept(Protocol):
    """One convention for every step of the server's half with state: JSON ``state_dict()``, ``tensors()`` under
    names of its own, and ``load_state_dict(state, tensors)`` given the checkpoint's tensors."""

    def state_dict(self) -> Mapping[str, Any]: ...

    def tensors(self) -> Mapping[str, Tensor]: ...

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None: ...


class StateTensors(Protocol):
    """The algorithm's and the server optimiser's state: tensors by name."""

    def state_dict(self) -> Mapping[str, Tensor]: ...

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None: ...


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

    def parts(self) -> list[tuple[str, Kept | None, str]]:
        """Each step with state, with its key in meta.json (None there: the run has no such step) and the
        prefix its tensors' names take."""
        ...


def saved(engine: Federated) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """The engine's tensors (on the host, copied now) and JSON for a checkpoint."""
    tensors = {"global": engine.global_state.to("cpu", copy=True)}
    tensors |= {f"algorithm.{k}": v.to("cpu") for k, v in engine.algorithm.state_dict().items()}
    tensors |= {f"server_optimizer.{k}": v.to("cpu") for k, v in engine.server_step.state_dict().items()}
    meta: dict[str, Any] = {}
    for key, part, prefix in engine.parts():  # copied: a buffer (the asynchronous one) changes in place
        meta[key] = part.state_dict() if part is not None else None
        tensors |= {prefix + k: v.to("cpu", copy=True) for k, v in (part.tensors() if part else {}).items()}
    meta |= {"runtime": engine.runtime.state_dict(), "owner": {str(k): v for k, v in engine.owner.items()}}
    return tensors, meta


def load_saved(engine: Federated, tensors: Mapping[str, Tensor], meta: Mapping[str, Any]) -> None:
    """Put ``engine``'s own state back from a checkpoint (after every run's, the client states included)."""
    legacy = meta.get("format", 1) == 1  # written before checkpoints had a format: the shims below apply
    engine.global_state.copy_(tensors["global"])
    engine.algorithm.load_state_dict(_prefixed(tensors, "algorithm."))
    server = _server_step_state(tensors) if legacy else _prefixed(tensors, "server_optimizer.")
    engine.server_step.load_state_dict(server)
    engine.runtime.load_state_dict(meta["runtime"])
    engine.owner = {int(k): int(v) for k, v in meta["owner"].items()}
    for key, part, prefix in engine.parts():  # a part the checkpoint has no state for (an older one's) starts anew
        if part is not None and meta.get(key) is not None:
            part.load_state_dict(meta[key], _prefixed(tensors, prefix) if prefix else tensors)
    engine.executor.store = engine.store  # a rank that rescanned the shared state directory has a new store
    if legacy and (engine.pool.is_root or engine.cfg.state.backend == "memory"):  # where the states were loaded
        _adopt_old_residuals(engine, tensors)


def _server_step_state(tensors: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The server optimiser's state; a checkpoint written before ``server_optimizer`` existed kept it with the
    algorithm's (FedAdam's ``m`` and ``v``, the server steps as ``server_round``), and one written when 1-bit
    LAMB was a compressor kept its server half as ``uplink_server`` (its steps are the server's)."""
    own = _prefixed(tensors, "server_optimizer.")
    lamb = _prefixed(tensors, "uplink_server.")
    if lamb:
        return {**own, **lamb, "t": own.get("steps", torch.tensor(0))}
    if own:
        return own
    old = _prefixed(tensors, "algorithm.")
    steps = {"steps": old["server_round"]} if "server_round" in old else {}
    return {**{k: old[k] for k in ("m", "v") if k in old}, **steps}


def _prefixed(tensors: Mapping[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def _adopt_old_residuals(engine: Federated, tensors: Mapping[str, Tensor]) -> None:
    """A checkpoint from before the top-k residuals lived in the state store kept them as ``control.residual.C``
    tensors, in units of the client's weight: they join their clients' states (unweighted, as a client's update
    rows are now), so resuming such a run loses no unsent update."""
    control = {k.removeprefix("control."): v for k, v in tensors.items() if k.startswith("control.")}
    for cid, residual in Controller.residuals_of(control).items():
        weight = engine.opt.client_weight(engine.dataset.n_samples(cid))
        engine.store.put(cid, {**(engine.store.get(cid) or {}), UPLINK_PREFIX + "residual": residual / weight})
