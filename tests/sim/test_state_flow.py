"""Client state lives in the store only: put as soon as it is ready, copied on put, checkpointed as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.config import parse_config
from fedsim.sim import checkpoint, resume
from fedsim.sim.engine import Engine
from fedsim.sim.state_store import ClientState, MemoryStateStore, StateStore
from tests.conftest import tiny_config

CLIENTS = 10


def _engine(tmp_path: Path, **overrides: Any) -> Engine:
    tree = tiny_config(clients_per_round=CLIENTS, eval_every=0, threads=1, **overrides)
    return Engine(parse_config(tree), out_dir=tmp_path / "out", db_path=tmp_path / "fedsim.db")


def _copy(store: StateStore) -> dict[int, ClientState]:
    states = {cid: store.get(cid) for cid in range(CLIENTS)}
    return {cid: {k: v.clone() for k, v in s.items()} for cid, s in states.items() if s is not None}


@pytest.mark.parametrize("backend", ["memory", "disk"])
@pytest.mark.parametrize(
    "optimizer",
    [{"local_momentum": 0.9}, {"optimizer": "adam", "lr": 0.01}],
    ids=["momentum", "adam"],
)
def test_a_checkpoint_taken_while_the_next_round_trains_holds_its_own_round(
    tmp_path: Path, backend: str, optimizer: dict[str, Any]
) -> None:
    algorithm = {"name": "scaffold", "batch_size": 16, "optimizer_state": "client", **optimizer}
    engine = _engine(tmp_path, algorithm=algorithm, state={"backend": backend})
    engine.round(0)
    expected = _copy(engine.store)
    kept = ("optimizer.exp_avg", "optimizer.momentum")
    assert len(expected) == CLIENTS and all(any(k in s for k in kept) for s in expected.values())
    frozen = resume.snapshot(engine, 0)  # what the engine hands the background writer after round 0
    engine.round(1)  # the writer thread has not started yet: the next round trains first
    assert not all(torch.equal(engine.store.get(0)[k], v) for k, v in expected[0].items())  # type: ignore[index]
    written = checkpoint.write(frozen, tmp_path / "checkpoints", keep=2)
    engine.close()

    saved = MemoryStateStore()
    saved.load_snapshot(written / "state")
    assert sorted(_copy(saved)) == sorted(expected)
    for cid, state in expected.items():
        got = saved.get(cid)
        assert got is not None and sorted(got) == sorted(state)
        for name, tensor in state.items():
            assert torch.equal(got[name], tensor), f"client {cid}'s {name} in the round-0 checkpoint is round 1's"


def test_a_stored_state_does_not_change_when_the_caller_changes_its_tensors(tmp_path: Path) -> None:
    from fedsim.sim.state_store import DiskStateStore

    for store in (MemoryStateStore(), DiskStateStore(tmp_path, cache_bytes=1 << 20)):
        mine = {"c": torch.zeros(4, device="cpu")}
        store.put(7, mine)
        mine["c"].add_(1.0)
        got = store.get(7)
        assert got is not None and torch.equal(got["c"], torch.zeros(4, device="cpu"))
