"""Client state lives in the store only: put as soon as it is ready, copied on put, checkpointed as it was."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.algorithms.base import RoundContext
from fedsim.config import parse_config
from fedsim.sim.persist import checkpoint
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.state.state_store import ClientState, MemoryStateStore, StateStore
from fedsim.sim.state.write_back import StateWriteBack
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
    [{"client_optimizer": {"momentum": 0.9}}, {"client_optimizer": {"kind": "adam"}, "lr": 0.01}],
    ids=["momentum", "adam"],
)
def test_a_checkpoint_taken_while_the_next_round_trains_holds_its_own_round(
    tmp_path: Path, backend: str, optimizer: dict[str, Any]
) -> None:
    client = {**optimizer.get("client_optimizer", {}), "state": "client"}
    algorithm = {"kind": "scaffold", "batch_size": 16, **optimizer, "client_optimizer": client}
    engine = _engine(tmp_path, algorithm=algorithm, state={"backend": backend})
    engine.run_round(0)
    expected = _copy(engine.store)
    kept = ("optimizer.exp_avg", "optimizer.momentum")
    assert len(expected) == CLIENTS and all(any(k in s for k in kept) for s in expected.values())
    frozen = engine.snapshot(0)  # what the engine hands the background writer after round 0
    assert frozen.meta["format"] == 2 and frozen.meta["round"] == 0  # a format-2 checkpoint: no shims on resume
    engine.run_round(1)  # the writer thread has not started yet: the next round trains first
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
    from fedsim.sim.state.state_store import DiskStateStore

    for store in (MemoryStateStore(), DiskStateStore(tmp_path, cache_bytes=1 << 20)):
        mine = {"c": torch.zeros(4, device="cpu")}
        store.put(7, mine)
        mine["c"].add_(1.0)
        got = store.get(7)
        assert got is not None and torch.equal(got["c"], torch.zeros(4, device="cpu"))


class _SpyStore(MemoryStateStore):
    """A memory store that notes, at every put, what the round has trained so far and what is in flight."""

    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events
        self.write_back: StateWriteBack | None = None
        self.in_flight_at_put: list[tuple[int, int]] = []  # (bytes in flight, bound) at each put

    def put(self, cid: int, state: ClientState) -> None:
        self.events.append(f"put {cid}")
        if self.write_back is not None:
            self.in_flight_at_put.append((self.write_back.in_flight_bytes, self.write_back.bound_bytes))
        super().put(cid, state)


@pytest.mark.parametrize("executor", ["sequential", "fused"])
def test_each_state_is_stored_as_its_client_finishes_and_in_flight_bytes_stay_bounded(
    tmp_path: Path, executor: str
) -> None:
    clients = 60
    tree = tiny_config(
        clients_per_round=clients,
        eval_every=0,
        threads=1,
        data__clients=clients,
        algorithm={"kind": "scaffold", "batch_size": 16, "local_steps": 1},
        executor={"kind": executor, "clients": 4},
        state={"in_flight": 2},
    )
    engine = Engine(parse_config(tree), out_dir=tmp_path / "out", db_path=tmp_path / "fedsim.db")
    events: list[str] = []
    spy = _SpyStore(events)
    engine.store = engine.executor.store = spy
    spy.write_back = engine.executor.write_back  # type: ignore[attr-defined]
    trained = engine.executor.train(
        RoundContext(0, engine.global_state, engine.opt),
        [(cid, 0) for cid in range(clients)],
        observe=lambda cid, _: events.append(f"trained {cid}"),
    )
    assert len(trained) == clients and len(spy) == clients

    state_bytes = spy.memory_bytes() // clients  # one control variate per client
    assert spy.in_flight_at_put and all(0 < held <= bound == 2 * state_bytes for held, bound in spy.in_flight_at_put)
    assert engine.executor.write_back.peak_bytes <= 2 * state_bytes  # type: ignore[attr-defined]
    # each state reaches the store while the round trains, not at its end: client c's put comes before the
    # client one group later has trained (groups of 1 sequentially, of 4 fused)
    group = 4 if executor == "fused" else 1
    at = {e: i for i, e in enumerate(events)}
    for cid in range(clients - group):
        assert at[f"put {cid}"] < at[f"trained {cid + group}"], f"client {cid}'s state waited for the round's end"


class _LaggingCopies:
    """A stand-in for a GPU's copy engine: a state's copy is done only once someone waits for it (or for a
    later one), as when the device runs behind the host; ``to_host`` copies at once, as pinned memory would."""

    is_cuda = True

    def __init__(self) -> None:
        self.recorded: list[_Event] = []

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.clone()

    def record(self) -> _Event:
        self.recorded.append(_Event(self, len(self.recorded)))
        return self.recorded[-1]


class _Event:
    def __init__(self, owner: _LaggingCopies, index: int) -> None:
        self.owner, self.index, self.done = owner, index, False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        for event in self.owner.recorded[: self.index + 1]:  # a stream completes its work in order
            event.done = True


def test_the_write_back_keeps_at_most_its_slots_in_flight_and_puts_in_order() -> None:
    store = _SpyStore([])
    copies = _LaggingCopies()
    write_back = StateWriteBack(store, copies, slots=3)  # type: ignore[arg-type]
    store.write_back = write_back
    for cid in range(10):
        write_back.put(cid, {"c": torch.full((5,), float(cid), device="cpu")})
        assert write_back.in_flight_bytes <= write_back.bound_bytes == 3 * 20
        assert len(store) == max(0, cid - 2)  # a 4th state on its way first waits for the oldest and puts it
    assert write_back.peak_bytes == 3 * 20
    write_back.drain()
    assert [e for e in store.events] == [f"put {c}" for c in range(10)] and write_back.in_flight_bytes == 0
    for cid in range(10):
        got = store.get(cid)
        assert got is not None and torch.equal(got["c"], torch.full((5,), float(cid), device="cpu"))
