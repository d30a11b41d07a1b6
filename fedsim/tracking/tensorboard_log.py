"""TensorBoard event files: each metric a scalar under its name, at the step of the rounds done."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


class TensorBoardTracker:
    def __init__(self, log_dir: Path, resumed_at: int) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # a resumed run purges what the interrupted one logged after the checkpoint
        self.writer = SummaryWriter(str(log_dir), purge_step=resumed_at + 1 if resumed_at else None)

    def log(self, round: int, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, global_step=round)
        self.writer.flush()

    def close(self, summary: Mapping[str, Any] | None) -> None:
        self.writer.close()
