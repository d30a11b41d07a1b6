"""Stopping a run on purpose (SIGINT, SIGTERM): at a safe point, then marked ``interrupted``.

A KeyboardInterrupt raised wherever the signal finds the main thread can land inside a lock, a half-written
file or a thread's join, and the run may never get to mark itself. So the command line's handler
(:func:`on_signal`) only asks: a loop that listens (:func:`stop_points`) stops at its next :func:`stop_point`
(before a round, a client or a step) by raising KeyboardInterrupt there, where its own handler marks the run
interrupted. A second signal, or one that arrives while no loop listens (loading data, a pool's parent waiting
for its ranks), stops at once as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from fedsim.sim.state.state_files import StateDamaged

T = TypeVar("T")


class RunInterrupted(Exception):
    """A run stopped by SIGINT or SIGTERM, marked ``interrupted`` in the run store; the message names its newest
    checkpoint and how to go on."""

    @classmethod
    def after(cls, run_id: str, rounds_done: int, out_dir: Path, damaged: StateDamaged | None = None) -> RunInterrupted:
        """Stopped by a signal, or by ``damaged``: then the newest checkpoints holding the same damaged file are
        set aside (renamed, not deleted), so that ``fedsim resume`` starts from an intact one."""
        from fedsim.sim.persist import checkpoint  # the command line imports this module; it must stay light

        directory, cause, aside = out_dir / "checkpoints", "", []
        if damaged is not None:
            cause = f"{damaged}; "
            aside = checkpoint.set_aside(directory, lambda ckpt: damaged_copy(ckpt / "state", damaged))
        saved = checkpoint.complete(directory)
        newest = "newest intact checkpoint" if damaged is not None else "newest checkpoint"
        resume = f"{newest} {saved[-1]}: `fedsim resume {out_dir}`" if saved else "no checkpoint"
        if aside:
            resume += f" ({len(aside)} newer holding the damaged file set aside as {aside[0].parent}/.damaged-*)"
        return cls(f"{cause}run {run_id} interrupted after round {rounds_done}; {resume}")


def damaged_copy(state_dir: Path, damaged: StateDamaged) -> bool:
    """Whether a checkpoint's copy of ``damaged``'s file is damaged too."""
    from fedsim.sim.state.state_files import StateStoreError, read_state

    copy = state_dir / damaged.path.name
    if not copy.is_file():
        return False
    try:
        read_state(copy, damaged.cid)
    except StateStoreError:
        return True
    return False


_requested = threading.Event()
_listening = 0  # loops inside stop_points()


def on_signal(signum: int, frame: object) -> None:
    """The SIGINT/SIGTERM handler: ask a listening loop to stop at its next safe point, else stop now."""
    if _listening and not _requested.is_set():
        _requested.set()
        return
    raise KeyboardInterrupt


@contextmanager
def stop_points(listen: bool = True) -> Iterator[None]:
    """While inside, a signal waits for the loop's next :func:`stop_point` (``listen=False``: it does not; a
    rank of a multi-process pool must not stop alone between two collectives)."""
    global _listening
    if not _listening:
        _requested.clear()  # a request left by a loop that ended before its next stop point is not this loop's
    _listening += int(listen)
    try:
        yield
    finally:
        _listening -= int(listen)


def stop_point() -> None:
    """Raise KeyboardInterrupt here if a signal asked the run to stop."""
    if _requested.is_set():
        _requested.clear()
        raise KeyboardInterrupt


def stoppable(items: Iterable[T]) -> Iterator[T]:
    """``items`` with a :func:`stop_point` before each, listening meanwhile: a loop over them stops before its
    next item when a signal asks."""
    with stop_points():
        for item in items:
            stop_point()
            yield item
