"""Client state stores: round trips, bounded memory, atomic files, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fedsim.sim.state.state_store import DiskStateStore, MemoryStateStore, StateStore, StateStoreError, write_atomic


def _state(cid: int, n: int = 1000) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(cid)
    return {"c": torch.randn(n, generator=gen), "step": torch.tensor([cid])}


def _stores(tmp_path: Path) -> list[StateStore]:
    return [MemoryStateStore(), DiskStateStore(tmp_path / "s", cache_bytes=20_000)]


def test_round_trip_both_backends(tmp_path: Path) -> None:
    for store in _stores(tmp_path):
        assert store.get(3) is None and 3 not in store
        for cid in range(12):
            store.put(cid, _state(cid))
        for cid in range(12):
            got = store.get(cid)
            assert got is not None and torch.equal(got["c"], _state(cid)["c"])
        assert len(store) == 12 and 11 in store


def test_disk_files_are_safetensors_named_by_client(tmp_path: Path) -> None:
    store = DiskStateStore(tmp_path, cache_bytes=0)
    store.put(42, _state(42))
    on_disk = load_file(tmp_path / "client-42.safetensors")
    assert torch.equal(on_disk["c"], _state(42)["c"])
    assert store.disk_bytes() == (tmp_path / "client-42.safetensors").stat().st_size > 4000


def test_byte_counts_follow_puts_replacements_releases_and_reopening(tmp_path: Path) -> None:
    memory = MemoryStateStore()
    memory.put(1, _state(1, 1000))
    memory.put(2, _state(2, 500))
    memory.put(1, _state(1, 250))  # replaced: only the new state counts
    assert memory.memory_bytes() == (250 * 4 + 8) + (500 * 4 + 8)
    memory.release([2])
    assert memory.memory_bytes() == 250 * 4 + 8
    disk = DiskStateStore(tmp_path, cache_bytes=0)
    for cid, n in ((1, 1000), (2, 500), (1, 250)):
        disk.put(cid, _state(cid, n))
    files = sum(p.stat().st_size for p in tmp_path.glob("client-*.safetensors"))
    assert disk.disk_bytes() == files
    assert DiskStateStore(tmp_path, cache_bytes=0).disk_bytes() == files  # a reopened store counts what is there


def test_a_view_restored_over_a_warm_cache_counts_each_state_once(tmp_path: Path) -> None:
    """A resume restores the cache's view after the client states are loaded; a state read in between is in
    the cache already. Two states of 1,000 and 500 float32 values (plus an 8-byte step) are 6,016 bytes."""
    disk = DiskStateStore(tmp_path, cache_bytes=20_000)
    disk.put(1, _state(1, 1000))
    disk.put(2, _state(2, 500))
    disk.flush()
    view = disk.view()
    assert view == {"on_disk": [1, 2], "cached": [1, 2]}
    assert disk.get(1) is not None  # now the most recently used
    disk.restore_view(view)
    assert disk.memory_bytes() == (1000 * 4 + 8) + (500 * 4 + 8)
    assert list(disk.view()["cached"]) == [1, 2]


def test_lru_memory_stays_under_its_byte_bound(tmp_path: Path) -> None:
    bound = 50_000  # each state is 4,008 bytes: about 12 fit
    store = DiskStateStore(tmp_path, cache_bytes=bound)
    peak = 0
    for cid in range(200):
        store.put(cid, _state(cid))
        peak = max(peak, store.memory_bytes())
    assert 0 < peak <= bound
    got = store.get(0)  # evicted long ago: read back from its file
    assert got is not None and torch.equal(got["c"], _state(0)["c"])
    store.flush()
    assert len(list(tmp_path.glob("client-*.safetensors"))) == 200
    assert not list(tmp_path.glob("*.tmp"))


def test_reopened_store_sees_flushed_states(tmp_path: Path) -> None:
    store = DiskStateStore(tmp_path, cache_bytes=1_000_000)
    store.put(1, _state(1))
    store.close()
    again = DiskStateStore(tmp_path, cache_bytes=1_000_000)
    got = again.get(1)
    assert got is not None and torch.equal(got["c"], _state(1)["c"])


def test_truncated_file_names_client_and_path(tmp_path: Path) -> None:
    store = DiskStateStore(tmp_path, cache_bytes=0)
    store.put(7, _state(7))
    path = tmp_path / "client-7.safetensors"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(StateStoreError, match=r"client 7 from .*client-7\.safetensors"):
        store.get(7)


def test_interrupted_write_never_replaces_the_good_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "client-1.safetensors"
    write_atomic(path, _state(1))

    def crash(*args: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("fedsim.sim.state.state_store.os.replace", crash)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, _state(99))
    assert torch.equal(load_file(path)["c"], _state(1)["c"])
    assert [p.name for p in tmp_path.iterdir()] == ["client-1.safetensors"]


def test_snapshot_and_restore(tmp_path: Path) -> None:
    for i, store in enumerate(_stores(tmp_path)):
        for cid in range(5):
            store.put(cid, _state(cid))
        snap = tmp_path / f"snap{i}"
        store.snapshot(snap)
        store.put(0, _state(100))  # changes after the snapshot must not leak into it
        store.load_snapshot(snap)
        got = store.get(0)
        assert got is not None and torch.equal(got["c"], _state(0)["c"]) and len(store) == 5
