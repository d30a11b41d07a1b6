"""What a command checks and clears before it writes a run: the output, state and tracking directories and the run
store file (``--overwrite``'s clearing is :func:`fedsim.sim.persist.outputs.clear`)."""

from __future__ import annotations

import os
from pathlib import Path

from fedsim.config import ConfigError
from fedsim.sim.persist.outputs import clear

__all__ = ["DB_HELP", "check_outputs", "clear"]

DB_HELP = "run store (default: $FEDSIM_DB, else runs/fedsim.db)"  # every command's --db

SQLITE_HEADER = b"SQLite format 3\x00"


def _writable(path: Path, flag: str) -> None:
    """``path`` (a directory, existing or to be made) can be written, or :class:`ConfigError` naming ``flag``."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{flag} {path}: exists and is not a directory")
    parent = path
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(f"{flag} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: {parent} is not writable")


def check_outputs(out: Path, db: Path, state_dir: Path | None = None, tracking_dir: Path | None = None) -> None:
    """Every path a run will write, checked before anything is written: the output, state and tracking
    directories can be made and written, and ``db`` is a run store fedsim can open (or can be created)."""
    _writable(out, "--out")
    if state_dir is not None:
        _writable(Path(state_dir), "state.dir")
    if tracking_dir is not None:
        _writable(Path(tracking_dir), "tracking.dir")
    if db.is_dir():
        raise ConfigError(f"--db {db}: is a directory, not a run store file")
    if db.exists():
        with db.open("rb") as f:  # the header, not a connection: opening a WAL store would leave -shm/-wal files
            header = f.read(16)
        if header and header != SQLITE_HEADER:
            raise ConfigError(f"--db {db}: not a run store (not an SQLite database)")
        if not os.access(db, os.W_OK):
            raise ConfigError(f"--db {db}: not writable")
    else:
        _writable(db.parent, "--db")
