"""The trackers a run writes its rounds to, opened on rank 0 when the run begins and closed when it ends.

A tracker gets each round's metrics once the round (and any callback after it) is done, as ``log(round,
metrics)`` with ``round`` the rounds done so far (1 after the first, as the callbacks and the progress line
count), and the summary at the end. A resumed run goes on in the same files from its checkpoint's round: what
the interrupted run logged after it is dropped (CSV), purged (TensorBoard) or overwritten (W&B's history)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from fedsim.config import TrackingConfig


class Tracker(Protocol):
    def log(self, round: int, metrics: Mapping[str, float]) -> None: ...

    def close(self, summary: Mapping[str, Any] | None) -> None:
        """The run ended: with its summary.json fields, or None when it failed or was interrupted."""
        ...


def open_trackers(
    cfg: TrackingConfig, out_dir: Path, run_id: str, config: Mapping[str, Any], resumed_at: int
) -> list[Tracker]:
    """The backends ``cfg`` names, writing under ``cfg.dir`` or ``out_dir``; ``resumed_at`` is the rounds
    already done (0 for a fresh run)."""
    where = Path(cfg.dir) if cfg.dir is not None else out_dir
    trackers: list[Tracker] = []
    for backend in cfg.backends:
        if backend == "csv":
            from fedsim.tracking.csv_log import CsvTracker

            trackers.append(CsvTracker(where / "metrics.csv", resumed_at))
        elif backend == "tensorboard":
            from fedsim.tracking.tensorboard_log import TensorBoardTracker

            trackers.append(TensorBoardTracker(where / "tensorboard", resumed_at))
        else:
            from fedsim.tracking.wandb_log import WandbTracker

            trackers.append(WandbTracker(where, run_id, config, cfg.wandb_project, cfg.wandb_mode, resumed_at))
    return trackers
