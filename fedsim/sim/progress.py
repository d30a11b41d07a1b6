"""A rich progress bar showing round, the task's test metric and training throughput."""

from __future__ import annotations

from types import TracebackType

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedsim.tasks.base import EvalResult


class RoundProgress:
    """Context manager around :class:`rich.progress.Progress`; does nothing when ``enabled`` is false."""

    def __init__(self, rounds: int, enabled: bool = True) -> None:
        self._progress = Progress(
            TextColumn("round"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("{task.fields[score]}"),
            TextColumn("{task.fields[rate]} samples/s"),
            TimeElapsedColumn(),
            disable=not enabled,
        )
        self._task = self._progress.add_task("rounds", total=rounds, score="-", rate="-")

    def __enter__(self) -> RoundProgress:
        self._progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._progress.stop()

    def update(self, completed: int, last_eval: EvalResult | None, samples_per_s: float) -> None:
        score = f"{last_eval.metric} {last_eval.value:.4g}" if last_eval is not None else "-"
        self._progress.update(self._task, completed=completed, score=score, rate=f"{samples_per_s:,.0f}")
