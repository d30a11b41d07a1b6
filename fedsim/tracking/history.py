"""A run's rounds as a pandas DataFrame, from the run store: one row per round, a column per metric."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fedsim.config import ConfigError
from fedsim.runstore import RoundRow, RunStore, RunStoreError, default_db
from fedsim.tracking.metrics import round_metrics

if TYPE_CHECKING:
    import pandas as pd


def history_frame(rows: Sequence[RoundRow]) -> pd.DataFrame:
    """``round`` (rounds done: 1 after the first) and every metric :func:`round_metrics` names, NaN where a
    round did not record it (``test_accuracy`` between evaluations)."""
    import pandas as pd

    frame = pd.DataFrame([{"round": row.round + 1, **round_metrics(row)} for row in rows])
    return frame if len(frame) else pd.DataFrame({"round": pd.Series(dtype="int64")})


def read_run(run: str | Path, db: str | Path | None = None) -> pd.DataFrame:
    """The rounds of ``run``: a run's output directory (its summary.json or config.json says which run; with
    neither, the newest run of that name) or a run id, in the run store ``db`` (``fedsim run``'s default:
    ``$FEDSIM_DB``, else runs/fedsim.db)."""
    db = Path(db) if db is not None else default_db()
    run_id = _run_id(Path(run)) if Path(run).is_dir() else str(run)
    try:
        store = RunStore.open_readonly(Path(db))
    except RunStoreError as exc:
        raise ConfigError(str(exc)) from None
    with store:
        runs = store.list_runs()
        found = [r for r in runs if r.run_id == run_id] or sorted(
            (r for r in runs if r.name == run_id), key=lambda r: r.started_at
        )
        if not found:
            raise ConfigError(f"{run}: no such run in {db} (`fedsim runs --db {db}` lists them)")
        return history_frame(store.rounds(found[-1].run_id))


def _run_id(out: Path) -> str:
    summary = out / "summary.json"
    if summary.is_file():
        return str(json.loads(summary.read_text(encoding="utf-8"))["run_id"])
    config = out / "config.json"
    if config.is_file():  # a run under way or interrupted: its name, the newest run of it
        return str(json.loads(config.read_text(encoding="utf-8"))["name"])
    raise ConfigError(f"{out}: not a fedsim run directory (no summary.json or config.json)")
