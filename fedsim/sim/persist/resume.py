"""What a checkpoint of a running simulation holds, and putting an engine back to it.

A snapshot is the global model, the torch RNG, the algorithm's and the controller's tensors, the bookkeeping
needed to go on as if never stopped (ledger, runtime model, state owners, running totals, the last evaluation),
and a frozen view of the client-state store; :mod:`fedsim.sim.persist.checkpoint` writes it crash-safely.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor

from fedsim.comm.ledger import ByteLedger
from fedsim.config import ConfigError, RunConfig
from fedsim.control.skewscout import Controller
from fedsim.data.base import FederatedDataset
from fedsim.runstore import RunStore
from fedsim.sim.executors.base import UPLINK_PREFIX, Executor
from fedsim.sim.persist import checkpoint
from fedsim.sim.runtime.pool import Pool
from fedsim.sim.runtime.runtime_model import RuntimeModel
from fedsim.sim.state.shared_dir import check_shared
from fedsim.sim.state.state_store import StateStore, build_state_store, remove_temporaries
from fedsim.tasks import EvalResult


class Engine(Protocol):
    """What of a running engine (:class:`fedsim.sim.rounds.engine.Engine`) a checkpoint saves and a resume restores;
    named here so that this module needs nothing from the engine's."""

    cfg: RunConfig
    dataset: FederatedDataset
    out_dir: Path
    pool: Pool
    global_state: Tensor
    algorithm: Any
    control: Controller | None  # SkewScout's; None under control: fixed
    ledger: ByteLedger
    runtime: RuntimeModel
    owner: dict[int, int]
    totals: dict[str, float]
    last_eval: EvalResult | None
    store: StateStore
    executor: Executor
    next_round: int
    privacy: Any  # fedsim.privacy.dp.DifferentialPrivacy | None
    secagg: Any  # fedsim.privacy.secagg.SecAggPlus | None
    robust: Any  # fedsim.robust.RobustAggregation | None
    downlink: Any  # fedsim.comm.downlink.Downlink | None
    asynchronous: Any  # fedsim.asynchronous.server.AsyncServer | None
    selector: Any  # fedsim.sim.selection.Selector
    server_step: Any  # fedsim.algorithms.server.ServerStep
    server_stages: Any  # fedsim.sim.server_stages.ServerStages
    attack: Any  # fedsim.robust.Attack | None
    writer: checkpoint.BackgroundWriter
    run_id: str
    runstore: RunStore | None
    started: float  # time.perf_counter() at the start, as if never stopped

    def spent(self, rounds: int) -> bool: ...


class Kept(Protocol):
    """One convention for every step of the server's half with state: JSON ``state_dict()``, ``tensors()`` under
    names of its own, and ``load_state_dict(state, tensors)`` given the checkpoint's tensors."""

    def state_dict(self) -> Mapping[str, Any]: ...

    def tensors(self) -> Mapping[str, Tensor]: ...

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None: ...


def kept(engine: Engine) -> list[tuple[str, Kept | None, str]]:
    """The server-side steps a checkpoint keeps, each with its key in meta.json (None there: the run has no such
    step) and the prefix its tensors' names take: the adaptive clip, SecAgg+'s totals and failed rounds, the
    rule's centre and failures, the attack's turns, the downlink's model and memory, SkewScout's knob and policy,
    the selector's reports, your own stages, the asynchronous clock and results in flight."""
    return [
        ("privacy", engine.privacy, ""),
        ("secagg", engine.secagg, ""),
        ("robust", engine.robust, ""),
        ("attack", engine.attack, ""),
        ("downlink", engine.downlink, ""),
        ("control", engine.control, ""),
        ("selection", engine.selector, "selection."),  # a selector, yours too, names its tensors plainly
        ("server_stages", engine.server_stages, ""),
        ("asynchronous", engine.asynchronous, ""),
    ]


def snapshot(engine: Engine, r: int) -> checkpoint.Snapshot:
    """Everything rank 0 needs to resume after round ``r``; tensors copied to the host now."""
    tensors = {"global": engine.global_state.to("cpu", copy=True), "rng.torch": torch.get_rng_state()}
    tensors |= {f"algorithm.{k}": v.to("cpu") for k, v in engine.algorithm.state_dict().items()}
    tensors |= {f"server_optimizer.{k}": v.to("cpu") for k, v in engine.server_step.state_dict().items()}
    meta: dict[str, Any] = {}
    for key, part, prefix in kept(engine):  # copied: a buffer (the asynchronous one) changes in place
        meta[key] = part.state_dict() if part is not None else None
        tensors |= {prefix + k: v.to("cpu", copy=True) for k, v in (part.tensors() if part else {}).items()}
    meta |= {
        "round": r,
        "run_id": engine.run_id,
        "ledger": engine.ledger.state_dict(),
        "runtime": engine.runtime.state_dict(),
        "owner": {str(k): v for k, v in engine.owner.items()},
        "totals": engine.totals,
        "wall_s": time.perf_counter() - engine.started,  # a resumed run's wall_s goes on from here
        "last_eval": asdict(engine.last_eval) if engine.last_eval else None,
    }
    return checkpoint.Snapshot(r, tensors, meta, engine.store.freeze())


def checkpoint_if_due(engine: Engine, r: int) -> float:
    """Hand rank 0's snapshot after round ``r`` to the background writer when a checkpoint is due (never after
    the last round); returns the seconds taking it cost the round loop."""
    every = engine.cfg.checkpoint.every
    if every == 0 or (r + 1) % every or r == engine.cfg.rounds - 1 or engine.spent(r + 1):
        return 0.0
    if not engine.pool.is_root:
        return 0.0
    t0 = time.perf_counter()
    engine.writer.submit(snapshot(engine, r))
    return time.perf_counter() - t0


def _server_step_state(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
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


def restore(engine: Engine) -> None:
    """Put ``engine`` back to the newest complete checkpoint in its output directory (every rank calls this)."""
    if engine.pool.is_root:
        clear_cut_writes(engine.cfg, engine.out_dir)
    remedy = "a resume on several machines reads rank 0's checkpoints on every rank: --out on a shared filesystem"
    check_shared(engine.pool, engine.out_dir / "checkpoints", "--out", remedy)
    loaded = newest_checkpoint(engine.out_dir)
    engine.global_state.copy_(loaded.tensors["global"])
    torch.set_rng_state(loaded.tensors["rng.torch"])
    engine.algorithm.load_state_dict(_prefixed(loaded.tensors, "algorithm."))
    engine.server_step.load_state_dict(_server_step_state(loaded.tensors))
    meta = loaded.meta
    engine.ledger.load_state_dict(meta["ledger"])
    engine.runtime.load_state_dict(meta["runtime"])
    engine.owner = {int(k): int(v) for k, v in meta["owner"].items()}
    engine.totals = {**dict.fromkeys(engine.totals, 0.0), **{k: float(v) for k, v in meta["totals"].items()}}
    engine.last_eval = EvalResult(**meta["last_eval"]) if meta["last_eval"] else None
    engine.started = time.perf_counter() - float(meta.get("wall_s", 0.0))
    for key, part, prefix in kept(engine):  # a part the checkpoint has no state for (an older one's) starts anew
        if part is not None and meta.get(key) is not None:
            part.load_state_dict(meta[key], _prefixed(loaded.tensors, prefix) if prefix else loaded.tensors)
    pool, cfg = engine.pool, engine.cfg
    pool.broadcast(None)  # barrier: nobody reads the state directory while rank 0 rewrites it
    if pool.is_root or cfg.state.backend == "memory":
        engine.store.load_snapshot(loaded.path / "state")
        _adopt_old_residuals(engine, loaded.tensors)
    pool.broadcast(None)
    if not pool.is_root and cfg.state.backend == "disk":  # rescan the shared directory
        engine.store = engine.executor.store = build_state_store(cfg.state, engine.out_dir / "state")
    engine.next_round = loaded.round + 1
    engine.run_id = meta["run_id"]
    mark_resumed(engine.runstore, engine.run_id, loaded.round)


def _prefixed(tensors: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def clear_cut_writes(cfg: RunConfig, out_dir: Path) -> None:
    """Remove what writes a crash cut short left in the state and checkpoint directories: never read, only in
    the way; one warning saying how many."""
    removed = remove_temporaries(Path(cfg.state.dir or out_dir / "state"))
    removed += checkpoint.remove_temporaries(out_dir / "checkpoints")
    if removed:
        warn(f"removed {removed} temporary file(s) of writes cut short by the crash")


def newest_checkpoint(out_dir: Path) -> checkpoint.Loaded:
    """The newest complete checkpoint in ``out_dir/checkpoints``, or one ConfigError: nothing to resume."""
    loaded = checkpoint.load_latest(out_dir / "checkpoints", warn=warn)
    if loaded is None:
        raise ConfigError(f"no complete checkpoint in {out_dir / 'checkpoints'}: nothing to resume")
    return loaded


def mark_resumed(runstore: RunStore | None, run_id: str, round_done: int) -> None:
    """The run store (rank 0's) forgets the rounds after the checkpoint and says the run resumed."""
    if runstore is not None:
        runstore.truncate_after(run_id, round_done)
        runstore.set_status(run_id, "resumed")


def _adopt_old_residuals(engine: Engine, tensors: dict[str, torch.Tensor]) -> None:
    """A checkpoint from before the top-k residuals lived in the state store kept them as ``control.residual.C``
    tensors, in units of the client's weight: they join their clients' states (unweighted, as a client's update
    rows are now), so resuming such a run loses no unsent update."""
    control = {k.removeprefix("control."): v for k, v in tensors.items() if k.startswith("control.")}
    for cid, residual in Controller.residuals_of(control).items():
        weight = engine.cfg.algorithm.client_weight(engine.dataset.n_samples(cid))
        engine.store.put(cid, {**(engine.store.get(cid) or {}), UPLINK_PREFIX + "residual": residual / weight})


def warn(message: str) -> None:
    print(f"fedsim: warning: {message}", file=sys.stderr)
