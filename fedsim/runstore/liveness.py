"""Whether a run's process is alive: a lock it holds while the run is under way, not the age of a heartbeat.

A writer takes an exclusive ``flock`` on ``.NAME.live/RUN_ID.lock`` beside the store when a run starts or
resumes, and lets it go when the run finishes. The kernel drops the lock when the process ends, however it
ends (SIGKILL, a crash, power), and keeps it while the process lives, also while it is stopped (Ctrl-Z, a
sleeping laptop, a paused VM), which is when a heartbeat goes stale. So a reader that can take the lock knows
the process is gone; one that cannot knows it lives. The file holds the pid and host, for the message.

Where ``fcntl`` is missing (Windows) or the directory cannot be written (a read-only share), liveness is
unknown and the heartbeat decides, as before.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]


def lock_path(db: Path, run_id: str) -> Path:
    return db.parent / f".{db.name}.live" / f"{run_id}.lock"


class RunLocks:
    """The locks one writer holds, one per run it has under way."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self._held: dict[str, int] = {}

    def take(self, run_id: str) -> None:
        """Hold ``run_id``'s lock until :meth:`drop` (or the process ends); quietly nothing where locks cannot
        be taken here."""
        if fcntl is None or run_id in self._held:
            return
        path = lock_path(self.db, run_id)
        try:
            path.parent.mkdir(exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return
        for _ in range(50):  # a reader holds it shared for an instant while it asks
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                time.sleep(0.01)
        else:  # another process holds it: that one is the run's; this one is not
            os.close(fd)
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        self._held[run_id] = fd

    def drop(self, run_id: str) -> None:
        fd = self._held.pop(run_id, None)
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the lock

    def drop_all(self) -> None:
        for run_id in list(self._held):
            self.drop(run_id)


def holder(db: Path, run_id: str) -> str | None:
    """Who holds ``run_id``'s lock (``pid P on HOST``) while its process lives; None when nobody does or it
    cannot be told (no lock file, no ``fcntl``)."""
    if fcntl is None:
        return None
    path = lock_path(db, run_id)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            who = path.read_text().split()
            return f"pid {who[0]} on {who[1]}" if len(who) == 2 else "another process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def run_of(db: Path, pid: int) -> str | None:
    """The run whose lock process ``pid`` took on this host (held or, once the process is gone, left behind)."""
    host = socket.gethostname()
    for path in sorted(lock_path(db, "x").parent.glob("*.lock")):
        try:
            if path.read_text().split() == [str(pid), host]:
                return path.stem
        except OSError:
            continue
    return None


def forget(db: Path, run_id: str) -> None:
    """Remove a finished or deleted run's lock file (nothing when there is none)."""
    lock_path(db, run_id).unlink(missing_ok=True)
