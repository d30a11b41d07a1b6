"""Whether every rank of a pool sees one directory: what a multi-node run with files between ranks needs.

The disk state store is read by whichever rank trains a client next, and a resume reads rank 0's checkpoints on
every rank, so on several machines those directories must be one shared filesystem (NFS, a cluster mount). Rank
0 writes a token file with a fresh random name and content; every rank reads it back; a rank that cannot stops
the run before anything trains, with one line, on every rank.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from fedsim.config import ConfigError, StateConfig
from fedsim.sim.runtime.pool import Pool

TOKEN_PREFIX = ".fedsim-shared-"


def check_state_dir(pool: Pool, state: StateConfig, out_dir: Path, stateful: bool) -> None:
    """A stateful run on the disk store: every rank must see one state directory."""
    if stateful and state.backend == "disk":
        remedy = (
            "a run on several machines with state.backend=disk needs state.dir on a filesystem every machine "
            "mounts, or state.backend=memory, whose client states move between ranks"
        )
        check_shared(pool, Path(state.dir or out_dir / "state"), "state.dir", remedy)


def check_shared(pool: Pool, directory: Path, setting: str, remedy: str) -> None:
    """Raise :class:`ConfigError` on every rank unless every rank reads the token rank 0 wrote in ``directory``.

    ``setting`` names the config entry or flag that chose the directory and ``remedy`` says what would work."""
    if pool.world == 1:
        return
    token, where = "", ""
    if pool.is_root:
        directory.mkdir(parents=True, exist_ok=True)
        token, where = secrets.token_hex(16), str(directory.resolve())
        (directory / f"{TOKEN_PREFIX}{token}").write_text(token)
    token, where = pool.broadcast((token, where))
    try:
        seen = (directory / f"{TOKEN_PREFIX}{token}").read_text() == token
    except OSError:
        seen = False
    everyone, _ = pool.all_gather(seen)
    if pool.is_root:
        (directory / f"{TOKEN_PREFIX}{token}").unlink(missing_ok=True)
    blind = [rank for rank, ok in enumerate(everyone) if not ok]
    if blind:
        ranks = ", ".join(map(str, blind))
        raise ConfigError(
            f"{setting}: rank{'s' if len(blind) > 1 else ''} {ranks} of {pool.world} cannot see rank 0's "
            f"directory {where} (a token file rank 0 wrote there is missing where they look): {remedy}"
        )
