"""Finding the checkpoint a run resumes from: the writes a crash cut short cleared away, the newest complete
checkpoint, and the run store told (:meth:`fedsim.sim.run.context.RunContext.resume` puts the run back to it)."""

from __future__ import annotations

import sys
from pathlib import Path

from fedsim.config import ConfigError, StateConfig
from fedsim.runstore import RunStore
from fedsim.sim.persist import checkpoint
from fedsim.sim.state.state_store import remove_temporaries


def clear_cut_writes(state: StateConfig, out_dir: Path) -> None:
    """Remove what writes a crash cut short left in the state and checkpoint directories: never read, only in
    the way; one warning saying how many."""
    removed = remove_temporaries(Path(state.dir or out_dir / "state"))
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


def warn(message: str) -> None:
    print(f"fedsim: warning: {message}", file=sys.stderr)
