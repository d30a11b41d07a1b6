"""A Weights & Biases run, offline by default: its files stay in ``DIR/wandb`` until you ``wandb sync`` them."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class WandbTracker:
    def __init__(
        self, where: Path, run_id: str, config: Mapping[str, Any], project: str, mode: str, resumed_at: int
    ) -> None:
        import wandb

        where.mkdir(parents=True, exist_ok=True)
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True)
        self.run = wandb.init(
            project=project,
            name=run_id,
            id=hashlib.sha1(run_id.encode()).hexdigest()[:16],  # W&B's ids are short; fedsim's name the run
            dir=str(where),
            mode=mode,  # type: ignore[arg-type]
            config=dict(config),
            resume="allow" if resumed_at else None,
            settings=settings,
        )

    def log(self, round: int, metrics: Mapping[str, float]) -> None:
        self.run.log(dict(metrics), step=round)

    def close(self, summary: Mapping[str, Any] | None) -> None:
        if summary is not None:
            for name in ("final_accuracy", "final_loss", "best_accuracy", "wall_s", "bytes_up", "bytes_down"):
                value = summary.get(name)
                if isinstance(value, (int, float)) and math.isfinite(value):
                    self.run.summary[name] = value
        self.run.finish(exit_code=0 if summary is not None else 1)
