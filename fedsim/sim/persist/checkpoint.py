"""Crash-safe checkpoints, written in the background after an in-memory snapshot (CheckFreq-style).

A checkpoint is a directory ``ckpt-RRRRRR`` holding ``tensors.safetensors`` (global model, algorithm state),
``meta.json`` (round, ledger, runtime model, RNG), ``state/`` (the client state store) and ``MANIFEST.json``
with every file's size and SHA-256. It is written under a temporary name, fsynced and renamed, so a crash
leaves either a complete checkpoint or none; on resume a checkpoint whose files do not match its manifest is
rejected with a message naming the file, and the previous one is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import Tensor

from fedsim.sim.state.state_store import save_tensors

PREFIX = "ckpt-"


class CheckpointError(RuntimeError):
    """A checkpoint is incomplete or corrupt; the message names the file."""


@dataclass
class Snapshot:
    """Everything a checkpoint holds, copied in memory so training can go on while it is written."""

    round: int
    tensors: dict[str, Tensor]
    meta: dict[str, Any]
    write_state: Callable[[Path], None]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_tree(root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
    fd = os.open(root, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write(snapshot: Snapshot, directory: Path, keep: int) -> Path:
    """Write ``snapshot`` as ``directory/ckpt-RRRRRR`` atomically and prune all but the newest ``keep``."""
    final = directory / f"{PREFIX}{snapshot.round:06d}"
    tmp = directory / f".{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        save_tensors({k: v.contiguous() for k, v in snapshot.tensors.items()}, tmp / "tensors.safetensors")
        (tmp / "meta.json").write_text(json.dumps(snapshot.meta))
        snapshot.write_state(tmp / "state")
        files = sorted(p for p in tmp.rglob("*") if p.is_file())
        manifest = {str(p.relative_to(tmp)): {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in files}
        (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))
        _fsync_tree(tmp)
    except BaseException:  # a full disk: what was written of this checkpoint is of no use to anyone
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    for old in complete(directory)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def remove_temporaries(directory: Path) -> int:
    """Delete checkpoints whose write was cut short (``.ckpt-*.tmp``); returns how many."""
    left = list(directory.glob(f".{PREFIX}*.tmp")) if directory.is_dir() else []
    for path in left:
        shutil.rmtree(path, ignore_errors=True)
    return len(left)


def complete(directory: Path) -> list[Path]:
    """Checkpoint directories by round, oldest first (temporary ones excluded)."""
    return sorted(p for p in directory.glob(f"{PREFIX}*") if p.is_dir())


def set_aside(directory: Path, unusable: Callable[[Path], bool]) -> list[Path]:
    """Rename the newest checkpoints for which ``unusable`` holds to ``.damaged-ckpt-RRRRRR`` (kept, and no
    longer :func:`complete`), down to the first usable one; returns their new paths."""
    moved = []
    for path in reversed(complete(directory)):
        if not unusable(path):
            break
        moved.append(path.with_name(f".damaged-{path.name}"))
        shutil.rmtree(moved[-1], ignore_errors=True)
        os.replace(path, moved[-1])
    return moved


def verify(path: Path) -> None:
    """Raise :class:`CheckpointError` naming the first file that is missing, truncated or altered."""
    manifest_path = path / "MANIFEST.json"
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"checkpoint {path}: unreadable manifest {manifest_path} ({exc})") from None
    for name, entry in manifest.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"checkpoint {path}: missing file {file}")
        size = file.stat().st_size
        if size != entry["bytes"]:
            raise CheckpointError(f"checkpoint {path}: {file} is {size} bytes, expected {entry['bytes']} (truncated)")
        if _sha256(file) != entry["sha256"]:
            raise CheckpointError(f"checkpoint {path}: {file} does not match its checksum")


@dataclass(frozen=True)
class Loaded:
    path: Path
    round: int
    tensors: dict[str, Tensor]
    meta: dict[str, Any]


def load_latest(directory: Path, warn: Callable[[str], None]) -> Loaded | None:
    """The newest checkpoint that verifies; each rejected one is reported through ``warn``."""
    for path in reversed(complete(directory)):
        try:
            verify(path)
            tensors = load_file(path / "tensors.safetensors")
            meta = json.loads((path / "meta.json").read_text())
        except (CheckpointError, SafetensorError, OSError, ValueError) as exc:
            warn(f"{exc}; falling back to an older checkpoint")
            continue
        return Loaded(path, int(meta["round"]), tensors, meta)
    return None


class BackgroundWriter:
    """Writes one snapshot at a time on a thread; a new one first waits for the previous write.

    The wait is on an event the thread sets as it ends, not on ``Thread.join`` alone: a KeyboardInterrupt landing
    in ``join`` leaves CPython's thread marked stopped while it still writes (its later joins return at once, and
    the interpreter exits under it, leaving a ``.ckpt-*.tmp`` behind)."""

    def __init__(self, directory: Path, keep: int) -> None:
        self.directory = directory
        self.keep = keep
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._error: BaseException | None = None
        self.last_s: float | None = None  # seconds the newest finished write took (None: none finished yet)

    def submit(self, snapshot: Snapshot) -> None:
        self.wait()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(snapshot, self._done), name="fedsim-checkpoint")
        self._thread.start()

    def wait(self) -> None:
        """Block until the pending write is on disk; re-raise its error, if any."""
        if self._thread is not None:
            self._done.wait()
            self._thread.join()
            self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def settle(self) -> None:
        """Let the pending write finish as a run stops, so the line that says where to resume from names it; a
        write that failed is one warning on stderr (the run is stopping for another reason already)."""
        try:
            self.wait()
        except Exception as exc:
            print(f"fedsim: warning: the last checkpoint was not written: {exc}", file=sys.stderr)

    def _run(self, snapshot: Snapshot, done: threading.Event) -> None:
        t0 = time.perf_counter()
        try:
            write(snapshot, self.directory, self.keep)
            self.last_s = time.perf_counter() - t0
        except BaseException as exc:  # handed to the training thread at the next wait()
            self._error = exc
        finally:
            done.set()
