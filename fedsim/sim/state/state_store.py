"""Per-client state (SCAFFOLD control variates, Ditto personal models), in memory or spilled to disk.

The disk backend keeps one safetensors file per client, written atomically (temp file, fsync, rename) so a
crash leaves either the old state or the new one, never a torn file; each file's checksum is checked on every
read (:mod:`fedsim.sim.state.state_files`). A damaged file stops the run, resumable from the newest checkpoint whose
copy of it is intact, or with ``state.on_damage: reset`` restarts that client from fresh state. A checkpoint
gets its own copy of every file (a copy-on-write clone where the file system has them), made in the background
from hard links taken at the round's end: the store's own later writes (new files) cannot reach it, a file
altered in place before its copy is made does. A write-back LRU cache bounded in bytes keeps recently used
states in RAM, which is what keeps resident memory flat as the population grows.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from fedsim.config import StateConfig
from fedsim.sim.state.state_files import (
    ClientState,
    StateDamaged,
    StateStoreError,
    checksum,
    cid_of,
    clone_or_copy,
    file_name,
    link_or_copy,
    read_state,
    remove_temporaries,
    save_tensors,
    write_atomic,
)

__all__ = [
    "ClientState",
    "DiskStateStore",
    "MemoryStateStore",
    "StateDamaged",
    "StateStore",
    "StateStoreError",
    "build_state_store",
    "checksum",
    "clone_or_copy",
    "read_state",
    "remove_temporaries",
    "save_tensors",
    "write_atomic",
]


class StateStore(Protocol):
    """get/put of client state by id. ``put`` copies what it is given (nothing the caller does afterwards
    reaches the store); tensors from ``get`` are the store's own and must not be changed in place."""

    def get(self, cid: int) -> ClientState | None: ...

    def put(self, cid: int, state: ClientState) -> None: ...

    def __contains__(self, cid: object) -> bool: ...

    def __len__(self) -> int: ...

    def memory_bytes(self) -> int: ...

    def disk_bytes(self) -> int: ...

    def flush(self) -> None: ...

    def release(self, cids: Iterable[int]) -> dict[int, ClientState]:
        """Give up this process's copies of ``cids`` (they train on another rank next); returns the states
        that exist only here and must be handed to the new owner."""
        ...

    def freeze(self) -> Callable[[Path], None]:
        """Capture a consistent view now; the returned function writes it to a directory later."""
        ...

    def snapshot(self, dest: Path) -> None: ...

    def load_snapshot(self, src: Path) -> None: ...

    def view(self) -> dict[str, list[int]]:
        """What this process's store knows of, by client (a checkpoint keeps it with the snapshot)."""
        ...

    def restore_view(self, view: dict[str, list[int]]) -> None:
        """After :meth:`load_snapshot`, know what the checkpointed store knew: a resumed run then counts the
        clients and bytes the uninterrupted one does."""
        ...

    def close(self) -> None: ...

    def take_resets(self) -> int:
        """Clients restarted from fresh state since the last call, their files damaged (``state.on_damage``)."""
        ...


def state_nbytes(state: ClientState) -> int:
    return sum(t.numel() * t.element_size() for t in state.values())


def host_copy(state: ClientState) -> ClientState:
    """A copy of ``state`` in ordinary (pageable) host memory that shares storage with nothing: a store keeps
    this, so a caller that later changes its tensors in place, or reuses a pinned buffer, changes nothing
    stored, and a frozen view of the store stays what it was."""
    return {name: torch.empty(t.shape, dtype=t.dtype, device="cpu").copy_(t.detach()) for name, t in state.items()}


SNAPSHOT_FILE = "clients.safetensors"


class MemoryStateStore:
    """A dict of client states; ``snapshot`` writes them all into one safetensors file."""

    def __init__(self) -> None:
        self._states: dict[int, ClientState] = {}
        self._bytes = 0  # kept as states come and go: the engine reports it every round

    def get(self, cid: int) -> ClientState | None:
        return self._states.get(cid)

    def take_resets(self) -> int:
        return 0  # nothing held in memory can be damaged from outside

    def put(self, cid: int, state: ClientState) -> None:
        state = host_copy(state)
        old = self._states.get(cid)
        self._bytes += state_nbytes(state) - (0 if old is None else state_nbytes(old))
        self._states[cid] = state

    def __contains__(self, cid: object) -> bool:
        return cid in self._states

    def __len__(self) -> int:
        return len(self._states)

    def memory_bytes(self) -> int:
        return self._bytes

    def disk_bytes(self) -> int:
        return 0

    def flush(self) -> None:
        return None

    def release(self, cids: Iterable[int]) -> dict[int, ClientState]:
        released = {cid: self._states.pop(cid) for cid in cids if cid in self._states}
        self._bytes -= sum(state_nbytes(s) for s in released.values())
        return released

    def freeze(self) -> Callable[[Path], None]:
        # put stores copies and get's tensors are never changed in place, so a shallow copy is a consistent view
        frozen = dict(self._states)

        def write(dest: Path) -> None:
            # one file for all clients: a checkpoint then costs one write and one fsync, not one per client
            dest.mkdir(parents=True, exist_ok=True)
            tensors = {f"{cid}/{name}": t.contiguous() for cid, state in frozen.items() for name, t in state.items()}
            save_tensors(tensors, dest / SNAPSHOT_FILE)

        return write

    def snapshot(self, dest: Path) -> None:
        self.freeze()(dest)

    def load_snapshot(self, src: Path) -> None:
        bundle = src / SNAPSHOT_FILE
        if not bundle.exists():  # a snapshot of per-client files (the disk backend's layout)
            self._states = {cid_of(p): read_state(p, cid_of(p)) for p in src.glob("client-*.safetensors")}
            self._bytes = sum(state_nbytes(s) for s in self._states.values())
            return
        states: dict[int, ClientState] = {}
        try:
            bundled = load_file(bundle)
        except (SafetensorError, OSError, ValueError) as exc:
            raise StateStoreError(f"cannot load the client states snapshot {bundle}: {exc}") from None
        for key, tensor in bundled.items():
            cid, name = key.split("/", 1)
            states.setdefault(int(cid), {})[name] = tensor
        self._states = states
        self._bytes = sum(state_nbytes(s) for s in states.values())

    def view(self) -> dict[str, list[int]]:
        return {}  # it holds every state it has, and its snapshot all of them

    def restore_view(self, view: dict[str, list[int]]) -> None:
        return None

    def close(self) -> None:
        return None


class DiskStateStore:
    """One safetensors file per client under ``directory`` and a write-back LRU of at most ``cache_bytes``.

    A dirty state is written when it is evicted or on :meth:`flush`; until then the newest state is the one
    in the cache. A cache of 0 bytes writes every ``put`` through at once.
    """

    def __init__(self, directory: Path, cache_bytes: int, fsync: bool = True, on_damage: str = "stop") -> None:
        self.directory = directory
        self.cache_bytes = cache_bytes
        self.fsync = fsync  # the directory is made by the first write: building a store writes nothing
        self.on_damage = on_damage  # "stop": StateDamaged; "reset": the client starts again from fresh state
        self._resets = 0
        self._cache: OrderedDict[int, ClientState] = OrderedDict()
        self._dirty: set[int] = set()
        self._cached_bytes = 0
        self._on_disk: dict[int, int] = {}  # client -> its file's size in bytes
        self._disk_total = 0  # their sum, kept as they change: the engine asks every round
        self._scan()

    def path(self, cid: int) -> Path:
        return self.directory / file_name(cid)

    def get(self, cid: int) -> ClientState | None:
        state = self._cache.get(cid)
        if state is not None:
            self._cache.move_to_end(cid)
            return state
        if cid not in self._on_disk:
            if not self.path(cid).is_file():  # another rank sharing the directory may have written it
                return None
            self._on_file(cid)
        try:
            state = read_state(self.path(cid), cid)
        except StateDamaged as exc:
            if self.on_damage != "reset":
                raise
            self._set_aside(cid, exc)
            return None
        self._admit(cid, state, dirty=False)
        return state

    def _set_aside(self, cid: int, damaged: StateDamaged) -> None:
        """Keep a damaged file beside the store under a name no read or snapshot takes, and count the reset."""
        kept = self.directory / f"damaged-{file_name(cid)}"
        os.replace(self.path(cid), kept)
        self._disk_total -= self._on_disk.pop(cid, 0)
        self._resets += 1
        print(
            f"fedsim: warning: {damaged}; client {cid} starts again from fresh state (state.on_damage: reset), "
            f"the damaged file kept as {kept}",
            file=sys.stderr,
        )

    def take_resets(self) -> int:
        resets, self._resets = self._resets, 0
        return resets

    def put(self, cid: int, state: ClientState) -> None:
        self._drop(cid)
        if state_nbytes(state) > self.cache_bytes:
            self._write(cid, state)  # written now, so nothing of the caller's is kept
        else:
            self._admit(cid, host_copy(state), dirty=True)

    def __contains__(self, cid: object) -> bool:
        return cid in self._cache or cid in self._on_disk

    def __len__(self) -> int:
        # O(cache), not O(clients): the engine asks every round
        return len(self._on_disk) + sum(cid not in self._on_disk for cid in self._cache)

    def memory_bytes(self) -> int:
        return self._cached_bytes

    def disk_bytes(self) -> int:
        return self._disk_total

    def flush(self) -> None:
        for cid in sorted(self._dirty):
            self._write(cid, self._cache[cid])
        self._dirty.clear()

    def release(self, cids: Iterable[int]) -> dict[int, ClientState]:
        for cid in cids:
            state = self._cache.pop(cid, None)
            if state is None:
                continue
            self._cached_bytes -= state_nbytes(state)
            if cid in self._dirty:
                self._dirty.discard(cid)
                self._write(cid, state)
        return {}

    def freeze(self) -> Callable[[Path], None]:
        # files are replaced (new inode) on every write, so hard links taken now keep today's content; the
        # checkpoint itself gets copies, written later off the training thread, and shares no file with anyone.
        # Every client file in the directory, not only those this store wrote or read: the ranks of a pool share
        # it, and rank 0's checkpoint must hold the clients only another rank ever trained
        self.flush()
        self.directory.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".freeze-", dir=self.directory))
        for path in self.directory.glob("client-*.safetensors"):
            link_or_copy(path, staging / path.name)

        def write(dest: Path) -> None:
            try:
                shutil.copytree(staging, dest, copy_function=clone_or_copy)
            finally:
                shutil.rmtree(staging, ignore_errors=True)

        return write

    def snapshot(self, dest: Path) -> None:
        self.freeze()(dest)

    def load_snapshot(self, src: Path) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._cache.clear()
        self._dirty.clear()
        self._cached_bytes = 0
        for old in self.directory.glob("client-*.safetensors"):
            old.unlink()
        for p in src.glob("client-*.safetensors"):
            shutil.copy2(p, self.path(cid_of(p)))
        self._scan()

    def view(self) -> dict[str, list[int]]:
        """The clients whose files this store has seen (in a shared directory, other ranks' are there too) and
        those in its cache, least recently used first; taken after :meth:`freeze` has written every dirty one."""
        return {"on_disk": sorted(self._on_disk), "cached": list(self._cache)}

    def restore_view(self, view: dict[str, list[int]]) -> None:
        seen = set(view.get("on_disk", []))
        self._on_disk = {cid: size for cid, size in self._on_disk.items() if cid in seen}
        self._disk_total = sum(self._on_disk.values())
        for cid in view.get("cached", []):  # clean: every cached state was written by the checkpoint's flush
            if cid in self._on_disk:
                self._admit(cid, read_state(self.path(cid), cid), dirty=False)

    def close(self) -> None:
        self.flush()

    def _scan(self) -> None:
        self._on_disk = {cid_of(p): p.stat().st_size for p in self.directory.glob("client-*.safetensors")}
        self._disk_total = sum(self._on_disk.values())

    def _write(self, cid: int, state: ClientState) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path(cid), state, self.fsync)
        self._on_file(cid)

    def _on_file(self, cid: int) -> None:
        """Note client ``cid``'s file as it is now on disk."""
        size = self.path(cid).stat().st_size
        self._disk_total += size - self._on_disk.get(cid, 0)
        self._on_disk[cid] = size

    def _admit(self, cid: int, state: ClientState, dirty: bool) -> None:
        held = self._cache.pop(cid, None)  # a state cached already (a resumed view over a warm cache) counts once
        if held is not None:
            self._cached_bytes -= state_nbytes(held)
        self._cache[cid] = state
        self._cached_bytes += state_nbytes(state)
        if dirty:
            self._dirty.add(cid)
        while self._cached_bytes > self.cache_bytes and self._cache:
            old_cid, old = self._cache.popitem(last=False)
            self._cached_bytes -= state_nbytes(old)
            if old_cid in self._dirty:
                self._dirty.discard(old_cid)
                self._write(old_cid, old)

    def _drop(self, cid: int) -> None:
        old = self._cache.pop(cid, None)
        if old is not None:
            self._cached_bytes -= state_nbytes(old)
        self._dirty.discard(cid)


def build_state_store(cfg: StateConfig, default_dir: Path) -> StateStore:
    """The configured backend; ``cfg.cache_mb`` is MiB."""
    if cfg.backend == "memory":
        return MemoryStateStore()
    return DiskStateStore(cfg.dir or default_dir, int(cfg.cache_mb * 2**20), cfg.fsync, cfg.on_damage)
