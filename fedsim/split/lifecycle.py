"""One split run's life in the run store, shared by ``fedsim split``, the regions runtime and ``fedsim serve``.

A run starts as a new row (``running``), or resumes from a checkpoint's progress: its rows after the
checkpoint's step are dropped, so the steps trained again are recorded once, and it is marked ``resumed``. It
ends ``finished`` with its summary, ``failed``, or ``interrupted`` by a signal, with a message that says how to
go on. Without a run store (tests of the service alone) nothing is recorded and the run id is empty.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fedsim.runstore import ClientRow, RoundRow, RunStore
from fedsim.sim.persist.interrupted import RunInterrupted
from fedsim.split.config import SplitConfig
from fedsim.split.summary import SplitSummary


class SplitRun:
    """The run-store side of one split run: its id, the steps a checkpoint already holds, its rows, its end."""

    def __init__(self, store: RunStore | None, cfg: SplitConfig, progress: Mapping[str, Any] | None) -> None:
        self.store = store
        self.done = 0  # steps the checkpoint resumed from holds
        if progress is not None:
            self.run_id, self.done = str(progress["run_id"]), int(progress["step"])
            if store is not None and self.run_id:
                store.truncate_after(self.run_id, self.done)
                store.set_status(self.run_id, "resumed")
        elif store is not None:
            self.run_id = store.start_run(cfg.name, "split", cfg.model_dump(mode="json"), cfg.train.steps)
        else:
            self.run_id = ""

    def log(self, row: RoundRow, clients: list[ClientRow]) -> None:
        if self.store is not None:
            self.store.log_round(self.run_id, row, clients)

    def finish(self, summary: SplitSummary, out: Path) -> None:
        """Write ``out/summary.json`` and mark the run finished with it."""
        summary.write(out)
        if self.store is not None:
            self.store.finish_run(self.run_id, "finished", summary.as_dict())

    @contextmanager
    def ending(self, out: Path) -> Iterator[SplitRun]:
        """Marks the run ``interrupted`` on a signal (raising :class:`RunInterrupted` with the command that goes
        on) and ``failed`` on any other error, which it re-raises."""
        try:
            yield self
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM as the command line turns it
            if self.store is not None:
                self.store.finish_run(self.run_id, "interrupted", None)
            raise RunInterrupted(
                f"run {self.run_id} interrupted; with train.checkpoint_every set, `fedsim split CONFIG --out {out} "
                "--resume` goes on from its newest checkpoint"
            ) from None
        except BaseException:
            if self.store is not None:
                self.store.finish_run(self.run_id, "failed", None)
            raise
