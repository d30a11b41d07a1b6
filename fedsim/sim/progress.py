"""A rich progress bar showing round, test accuracy and training throughput."""

from __future__ import annotations

from types import TracebackType

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedsim.tasks.classification import EvalResult


class RoundProgress:
    """Context manager around :class:`rich.progress.Progress`; does nothing when ``enabled`` is false."""

    def __init__(self, rounds: int, enabled: bool = True) -> None:
        self._progress = Progress(
            TextColumn("round"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("acc {task.fields[acc]}"),
            TextColumn("{task.fields[rate]} samples/s"),
            TimeElapsedColumn(),
            disable=not enabled,
        )
        self._task = self._progress.add_task("rounds", total=rounds, acc="-", rate="-")

    def __enter__(self) -> RoundProgress:
        self._progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._progress.stop()

    def update(self, completed: int, last_eval: EvalResult | None, samples_per_s: float) -> None:
        acc = f"{last_eval.accuracy:.3f}" if last_eval is not None else "-"
        self._progress.update(self._task, completed=completed, acc=acc, rate=f"{samples_per_s:,.0f}")
