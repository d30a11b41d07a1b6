"""Stopping a run on purpose (SIGINT, SIGTERM): at a safe point, then marked ``interrupted``.

A KeyboardInterrupt raised wherever the signal finds the main thread can land inside a lock, a half-written
file or a thread's join, and the run may never get to mark itself. So the handler (:func:`on_signal`, which the
command line and :meth:`fedsim.Simulation.run` install) only asks. The first signal stops a loop that listens
(:func:`stop_points`) at its next round's :func:`stop_point`, where the round loop checkpoints the round it
finished and marks the run interrupted; a second stops it at the next ``inner`` stop point (before a client or
a node's step, in the middle of a round: the newest periodic checkpoint is the one to resume from); a third, or
one that arrives while no loop listens (loading data), stops at once.

The ranks of a pool must stop together, never one alone between two collectives: their loop has no inner stop
points, and at each round's stop point the ranks agree (``agree``, one all-reduce of a count) whether any was
asked, so all of them stop after the same round, which rank 0 checkpoints; a second signal stops a rank at once.
The parent of ``fedsim run --devices N`` forwards every signal it gets to its ranks (:func:`forwarding`: they
run in process groups of their own, so a signal to the parent or to its group reaches each rank once) and
waits for them to stop.

While a stopping run saves its last round and marks itself (:func:`shielded`), further signals are counted,
not raised: a second or third Ctrl-C cannot cut the interrupt checkpoint short or leave the run marked running.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from fedsim.sim.state.state_files import StateDamaged

T = TypeVar("T")


INTERRUPTED = ".interrupted"  # in a pool's output directory: rank 0's RunInterrupted line, for its parent


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by SIGINT or SIGTERM (or by a damaged state file), marked ``interrupted`` in the run store;
    the message names its newest checkpoint and how to go on. It is a KeyboardInterrupt, so that
    ``except KeyboardInterrupt`` around a run catches Ctrl-C as it would without fedsim."""

    @classmethod
    def after(
        cls, run_id: str, rounds_done: int, out_dir: Path, damaged: StateDamaged | None = None, how: str = ""
    ) -> RunInterrupted:
        """Stopped by a signal, or by ``damaged``: then the newest checkpoints holding the same damaged file are
        set aside (renamed, not deleted), so that ``fedsim resume`` starts from an intact one."""
        from fedsim.sim.persist import checkpoint  # the command line imports this module; it must stay light

        directory, cause, aside = out_dir / "checkpoints", "", []
        if damaged is not None:
            cause = f"{damaged}; "
            aside = checkpoint.set_aside(directory, lambda ckpt: damaged_copy(ckpt / "state", damaged))
        saved = checkpoint.complete(directory)
        newest = "newest intact checkpoint" if damaged is not None else "newest checkpoint"
        how = how or f"fedsim resume {out_dir}"
        resume = f"{newest} {saved[-1]}: `{how}`" if saved else "no checkpoint"
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


_requests = 0  # signals asking the listening loop to stop: 1 at its next round, 2 at its next inner point
_listening = 0  # loops inside stop_points()
_inner = True  # whether the listening loop stops at inner points (a pool's ranks do not: they stop together)
_shielded = 0  # code inside shielded(): a run saving itself as it stops
_forwards: list[Callable[[int], None]] = []  # a pool's parent: each signal goes on to its ranks


def on_signal(signum: int, frame: object) -> None:
    """The SIGINT/SIGTERM handler: ask a listening loop to stop after its round (first signal), before its next
    client (second; a pool's ranks and their parent: at once), else stop now; while a stopping run saves itself,
    only count. A pool's parent hands each signal to its ranks first."""
    global _requests
    for forward in _forwards:
        forward(signum)
    if _shielded or (_listening and _requests < (2 if _inner else 1)):  # handlers run in the main thread
        _requests += 1
        return
    raise KeyboardInterrupt


@contextmanager
def shielded() -> Iterator[None]:
    """While inside, a signal is counted and not raised: the code inside (a run's interrupt checkpoint, its
    status, its closing line) finishes; the run stops after it as it was stopping anyway."""
    global _shielded
    _shielded += 1
    try:
        yield
    finally:
        _shielded -= 1


@contextmanager
def forwarding(to: Callable[[int], None]) -> Iterator[None]:
    """While inside, every signal :func:`on_signal` gets is handed to ``to`` (a pool's parent: to its ranks)."""
    _forwards.append(to)
    try:
        yield
    finally:
        _forwards.remove(to)


@contextmanager
def stop_points(inner: bool = True) -> Iterator[None]:
    """While inside, a signal waits for the loop's next :func:`stop_point`. ``inner=False``: the loop's inner points
    never stop it (the ranks of a pool, which must not stop alone between two collectives), so a second signal
    stops it at once."""
    global _listening, _requests, _inner
    if not _listening:
        _requests = 0  # a request left by a loop that ended before its next stop point is not this loop's
    before = _inner
    _listening += 1
    _inner = inner
    try:
        yield
    finally:
        _listening -= 1
        _inner = before


def stop_point(inner: bool = False, agree: Callable[[bool], bool] | None = None) -> None:
    """Raise KeyboardInterrupt here if a signal asked the run to stop: a round's (or a step's) point stops on the
    first signal, an ``inner`` one (between two clients of a round) on the second. ``agree`` (a pool's ranks, at a
    round's point; every rank calls it) turns this rank's answer into the pool's: stop if any rank was asked."""
    global _requests
    asked = _requests >= (2 if inner else 1) and (_inner or not inner)
    if agree is not None:
        asked = agree(asked)
    if asked:
        _requests = 0
        raise KeyboardInterrupt


def signalled() -> bool:
    """Whether a signal asked the listening code to stop and no stop point has taken the request yet."""
    return _requests > 0


def stoppable(items: Iterable[T]) -> Iterator[T]:
    """``items`` with a :func:`stop_point` before each, listening meanwhile: a loop over them stops before its
    next item when a signal asks."""
    with stop_points():
        for item in items:
            stop_point()
            yield item


@contextmanager
def stopping_at_safe_points() -> Iterator[None]:
    """While inside, SIGINT and SIGTERM go to :func:`on_signal` (as on the command line), where Python's own
    handlers are in place and this is the main thread; the handlers before are put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    before = {sig: signal.getsignal(sig) for sig in defaults}
    mine = [sig for sig, default in defaults.items() if before[sig] is default]
    for sig in mine:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig in mine:
            signal.signal(sig, before[sig])
