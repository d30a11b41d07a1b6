"""Checkpoints of the decentralised round loop (:mod:`fedsim.decentralised.gossip`), and putting it back to one.

A decentralised run's state is its nodes' models, momenta and messages in the state store, the nodes' average
model, the ledger, the running totals and the last evaluation; :mod:`fedsim.sim.persist.checkpoint` writes them
crash-safely, off the training thread, as it does the federated loop's. A node's batches come from its own
(seed, round, node) generator and LGD elects from the round's losses, so nothing else carries over: a resumed
run goes on as if never stopped. One rank only: each rank holds its own nodes, and rank 0 writes the checkpoint.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor

from fedsim.comm.ledger import ByteLedger
from fedsim.config import ConfigError, RunConfig
from fedsim.runstore import RunStore
from fedsim.sim.persist import checkpoint
from fedsim.sim.persist.resume import clear_cut_writes, mark_resumed, newest_checkpoint
from fedsim.sim.runtime.pool import Pool
from fedsim.sim.state.state_store import StateStore
from fedsim.tasks import EvalResult


class GossipRun(Protocol):
    """What of a running :class:`fedsim.decentralised.gossip.GossipEngine` a checkpoint saves and a resume restores."""

    cfg: RunConfig
    out_dir: Path
    pool: Pool
    average: Tensor
    consensus: float
    ledger: ByteLedger
    totals: dict[str, float]
    last_eval: EvalResult | None
    store: StateStore
    next_round: int
    writer: checkpoint.BackgroundWriter
    run_id: str
    runstore: RunStore | None
    started: float


def check_one_rank(cfg: RunConfig, pool: Pool) -> None:
    if cfg.checkpoint.every and pool.world > 1:
        raise ConfigError(
            f"checkpoint.every: a decentralised run checkpoints on one rank only, not {pool.world} (each rank holds"
            " its own nodes' models)"
        )


def checkpoint_if_due(run: GossipRun, r: int) -> float:
    """Hand the snapshot after round ``r`` to the background writer when one is due (never after the last
    round); returns the seconds taking it cost the round loop."""
    every = run.cfg.checkpoint.every
    if every == 0 or (r + 1) % every or r == run.cfg.rounds - 1:
        return 0.0
    t0 = time.perf_counter()
    tensors = {"average": run.average.to("cpu", copy=True), "rng.torch": torch.get_rng_state()}
    meta = {
        "round": r,
        "run_id": run.run_id,
        "ledger": run.ledger.state_dict(),
        "totals": run.totals,
        "wall_s": time.perf_counter() - run.started,
        "last_eval": asdict(run.last_eval) if run.last_eval else None,
        "consensus": run.consensus,
    }
    run.writer.submit(checkpoint.Snapshot(r, tensors, meta, run.store.freeze()))
    return time.perf_counter() - t0


def restore(run: GossipRun) -> None:
    """Put ``run`` back to the newest complete checkpoint in its output directory."""
    clear_cut_writes(run.cfg, run.out_dir)
    loaded = newest_checkpoint(run.out_dir)
    run.average.copy_(loaded.tensors["average"])
    torch.set_rng_state(loaded.tensors["rng.torch"])
    meta = loaded.meta
    run.ledger.load_state_dict(meta["ledger"])
    run.totals = {**dict.fromkeys(run.totals, 0.0), **{k: float(v) for k, v in meta["totals"].items()}}
    run.last_eval = EvalResult(**meta["last_eval"]) if meta["last_eval"] else None
    run.started = time.perf_counter() - float(meta["wall_s"])
    run.consensus = float(meta["consensus"])
    run.store.load_snapshot(loaded.path / "state")
    run.next_round = loaded.round + 1
    run.run_id = meta["run_id"]
    mark_resumed(run.runstore, run.run_id, loaded.round)
