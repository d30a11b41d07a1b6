"""Progress of a run: a rich bar with round, the task's test metric, throughput and the time left on a
terminal; one plain line per evaluated round when the output is piped or logged (a bar would print nothing
until the end)."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from fedsim.tasks.base import EvalResult

DAY_S = 86_400.0


class RoundProgress:
    """Context manager around :class:`rich.progress.Progress`; shows nothing when ``enabled`` is false, but
    still warns (``warn``) when the run cannot end within a day."""

    def __init__(self, rounds: int, enabled: bool = True, warn: bool = False) -> None:
        """``warn``: say in one line when the first round shows the run cannot end within a day."""
        self._lines = False
        self._progress: Any = None  # rich is imported only for a run that shows progress (~25 ms)
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            console = Console()
            self._lines = not console.is_terminal  # piped: plain lines instead of a bar
            self._progress = Progress(
                TextColumn("round"),
                MofNCompleteColumn(),
                BarColumn(),
                TextColumn("{task.fields[score]}"),
                TextColumn("{task.fields[rate]} samples/s"),
                TextColumn("{task.fields[stages]}"),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=console,
                disable=self._lines,
            )
            self._task = self._progress.add_task("rounds", total=rounds, score="-", rate="-", stages="")
        self._rounds = rounds
        self._started = time.perf_counter()
        self._said: EvalResult | None = None
        self._warn = warn
        self._first: tuple[int, float] | None = None  # the first update's round and time

    def __enter__(self) -> RoundProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(
        self,
        completed: int,
        last_eval: EvalResult | None,
        samples_per_s: float | None,
        lr: float | None = None,
        stages: str = "",
    ) -> None:
        """The first call says where the run starts (a resumed run: its checkpoint's evaluation, already shown
        before the stop, so not printed again); ``stages`` is what the round's stages add (:func:`stage_figures`)."""
        if self._first is None:
            self._first, self._said = (completed, time.perf_counter()), last_eval
        else:
            self._check_length(completed, *self._first)
        score = f"{last_eval.metric} {last_eval.value:.4g}" if last_eval is not None else "-"
        if self._progress is not None:
            rate = "-" if samples_per_s is None else f"{samples_per_s:,.0f}"
            self._progress.update(self._task, completed=completed, score=score, rate=rate, stages=stages)
        if self._lines and last_eval is not None and last_eval is not self._said:
            self._said = last_eval
            elapsed = time.perf_counter() - self._started
            print(
                f"round {completed}/{self._rounds}: {score}, "
                + (f"{samples_per_s:,.0f} samples/s, " if samples_per_s is not None else "")
                + (f"lr {lr:.4g}, " if lr is not None else "")
                + (f"{stages}, " if stages else "")
                + f"{elapsed:.1f} s",
                file=sys.stdout,
                flush=True,
            )

    def _check_length(self, completed: int, start: int, since: float) -> None:
        """Once, after the first round this process ran: warn when the rounds left take more than a day."""
        now = time.perf_counter()
        if not self._warn or completed <= start:
            return
        self._warn = False
        per_round = (now - since) / (completed - start)
        left = per_round * (self._rounds - completed)
        if left > DAY_S:
            print(
                f"fedsim: warning: at {per_round:.3g} s a round, the {self._rounds - completed:,} rounds left "
                f"(rounds={self._rounds:,}) take {left / DAY_S:,.0f} days; Ctrl-C stops the run, resumable",
                file=sys.stderr,
                flush=True,
            )


def stage_figures(metrics: Mapping[str, float], bytes_up: float) -> str:
    """What the progress line adds from a round's metrics: the epsilon spent so far (a private run), the bytes
    clients have sent in the run so far (``bytes_up``), and the backdoor's success at the last evaluation (an
    attacked run)."""
    parts = [f"epsilon {metrics['epsilon']:.3g}"] if "epsilon" in metrics else []
    parts.append(f"{bytes_up / 1e6:,.1f} MB up" if bytes_up >= 1e6 else f"{bytes_up / 1e3:,.1f} kB up")
    if "backdoor_success" in metrics:
        parts.append(f"backdoor {metrics['backdoor_success']:.3g}")
    return ", ".join(parts)
