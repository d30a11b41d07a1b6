"""Finding the checkpoint a run resumes from: the writes a crash cut short cleared away, the newest complete
checkpoint, and the run store told (:meth:`fedsim.sim.run.context.RunContext.resume` puts the run back to it)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fedsim.config import ConfigError, StateConfig
from fedsim.runstore import RunStore
from fedsim.runstore.liveness import holder
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


def checkpointed_run(out_dir: Path) -> str | None:
    """The run id the newest complete checkpoint in ``out_dir`` holds (None: none, or unreadable)."""
    newest = checkpoint.complete(out_dir / "checkpoints")
    try:
        return str(json.loads((newest[-1] / "meta.json").read_text())["run_id"]) if newest else None
    except (OSError, ValueError, KeyError):
        return None


def check_resumable(out_dir: Path, db: Path) -> None:
    """One ConfigError when the run in ``out_dir`` cannot be resumed now: its process still lives (it holds the
    run's lock), and a second process would write its rounds beside it."""
    run_id = checkpointed_run(out_dir)
    if run_id is not None and (who := holder(db, run_id)):
        raise ConfigError(f"run {run_id} is still under way ({who}): stop it before resuming it")


def mark_resumed(runstore: RunStore | None, run_id: str, round_done: int, cfg: Any) -> None:
    """The run store (rank 0's) forgets the rounds after the checkpoint and says the run resumed. A store that
    does not list the run (it was deleted, or the output directory came from another store) lists it again
    from its settings ``cfg``, so the resumed rounds belong to a listed run; one warning says its rounds before
    the checkpoint are not there."""
    if runstore is None:
        return
    if runstore.get_run(run_id) is None:
        runstore.list_again(run_id, cfg.name, cfg.model_dump(mode="json"), cfg.rounds)
        warn(
            f"run {run_id} was not in the run store {runstore.path}: listed again from its checkpoint; its"
            f" rounds up to {round_done + 1} are not in this store"
        )
    runstore.truncate_after(run_id, round_done)
    runstore.set_status(run_id, "resumed")


def warn(message: str) -> None:
    print(f"fedsim: warning: {message}", file=sys.stderr)
