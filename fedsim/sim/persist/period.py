"""How often a run checkpoints: every k rounds as set, only when interrupted (0), or, with ``checkpoint.every:
auto``, a period chosen from what a checkpoint and a round measurably cost, as CheckFreq chooses it (Mohan et
al., FAST 2021: profile the first checkpoint, then set the period so checkpointing costs at most a given share).

A process's first round only starts the clock (it carries one-off costs: allocation, lazy imports, a GPU
warming up); its second ends with the first checkpoint, written at once rather than in the background so that
its whole cost is measured; every checkpoint after that chooses the next period from the newest measurements,
so a run whose rounds grow slower or faster keeps to its bounds. With ``c`` the seconds one checkpoint costs
(the round loop's stall plus the background write, both counted: on a CPU the writer takes cores from
training) and ``t`` the wall seconds per round since the last checkpoint::

    period = min(ceil(c / (max_share * t)), max(1, floor(max_interval_s / t)))   rounds

Checkpoints so take at most ``max_share`` of the wall time, unless that would leave more than
``max_interval_s`` seconds of work to a crash: that bound wins. Rank 0 measures and chooses; the choice travels
in the broadcast every checkpoint already ends with, so every rank of a pool checkpoints after the same rounds
and none waits at a barrier the others never reach. A resumed run measures again, on the machine it runs on.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from fedsim.config import CheckpointConfig
from fedsim.sim.persist.checkpoint import BackgroundWriter
from fedsim.sim.runtime.pool import Pool


@dataclass(frozen=True)
class Choice:
    """A period ``auto`` chose, in rounds, and what from: the seconds one checkpoint cost, the wall seconds of a
    round, and the bound that set it (``max_share`` or ``max_interval_s``)."""

    period: int
    cost_s: float
    round_s: float
    bound: str


def choose_period(cost_s: float, round_s: float, cfg: CheckpointConfig) -> Choice:
    """The rounds between checkpoints that cost ``cost_s`` seconds each, at ``round_s`` wall seconds a round:
    checkpoints take at most ``cfg.max_share`` of the wall time, and one is taken at least every
    ``cfg.max_interval_s`` seconds, which wins where the two disagree."""
    round_s = max(round_s, 1e-9)
    by_share = max(1, math.ceil(cost_s / (cfg.max_share * round_s)))
    by_interval = max(1, math.floor(cfg.max_interval_s / round_s))
    if by_share <= by_interval:
        return Choice(by_share, cost_s, round_s, "max_share")
    return Choice(by_interval, cost_s, round_s, "max_interval_s")


class CheckpointPeriod:
    """When a run checkpoints, the same answer on every rank: :meth:`due` after each round, :meth:`agree` as a
    checkpoint ends."""

    def __init__(self, cfg: CheckpointConfig) -> None:
        self.cfg = cfg
        self.auto = cfg.every == "auto"
        self.choice: Choice | None = None  # auto's newest (None: none chosen yet)
        self.unable = ""  # why auto takes no checkpoint now ('': it takes them)
        self._mark: tuple[int, float] | None = None  # auto: (round, perf_counter) the next choice measures from
        self._next = 0  # auto: the round after which the next checkpoint is due
        self._said: set[str] = set()

    def due(self, r: int, unheld: str, is_root: bool) -> bool:
        """Whether a checkpoint is due after round ``r`` (0-based). ``unheld`` names what of the run rank 0's
        checkpoint cannot hold now ('': nothing): ``auto`` then takes none and says so once (:meth:`cannot`)."""
        if not self.auto:
            return self.cfg.fixed > 0 and (r + 1) % self.cfg.fixed == 0
        if self._mark is None:  # this process's first round: the clock starts after it
            self._mark, self._next = (r, time.perf_counter()), r + 1
            return False
        return r >= self._next and not self.cannot(unheld, is_root)

    def cannot(self, unheld: str, is_root: bool) -> bool:
        """Whether ``auto`` takes no checkpoint because rank 0's cannot hold ``unheld`` (every rank gets the same
        answer); rank 0 says so on stderr once per reason, as the run starts or when a setting changes it."""
        self.unable = unheld if self.auto else ""
        if self.unable and is_root and self.unable not in self._said:
            self._said.add(self.unable)
            print(
                f"fedsim: warning: checkpoint.every=auto takes no checkpoint in this run: rank 0 does not hold"
                f" {self.unable}; a run killed, or stopped, cannot be resumed",
                file=sys.stderr,
            )
        return bool(self.unable)

    def agree(self, r: int, started: float, writer: BackgroundWriter, pool: Pool) -> None:
        """End the checkpoint after round ``r``, begun at ``started`` (``time.perf_counter``), on every rank: one
        broadcast, the barrier that keeps other ranks from writing the next round's client files while rank 0
        freezes these, which with ``auto`` also carries rank 0's choice of the next period."""
        if not self.auto:
            pool.broadcast(None)
            return
        choice = None
        if pool.is_root:
            assert self._mark is not None, "due() starts the clock before any checkpoint"
            stall = time.perf_counter() - started
            if self.choice is None:  # the first: written now, so that its write's seconds are known
                writer.wait()
            round_s = (started - self._mark[1]) / max(r - self._mark[0], 1)
            choice = choose_period(stall + (writer.last_s or 0.0), round_s, self.cfg)
        self.choice = pool.broadcast(choice)
        assert self.choice is not None
        self._mark, self._next = (r, time.perf_counter()), r + self.choice.period

    def record(self) -> dict[str, Any]:
        """summary.json's ``checkpoint``: ``every`` as set and the ``period`` in rounds the run checkpointed at
        (``auto``: its newest choice with what it was chosen from, ``period`` null before the first, and
        ``unable``, why it took none)."""
        if not self.auto:
            return {"every": self.cfg.every, "period": self.cfg.every}
        chosen = asdict(self.choice) if self.choice else dict.fromkeys(("period", "cost_s", "round_s", "bound"))
        bounds = {"max_share": self.cfg.max_share, "max_interval_s": self.cfg.max_interval_s}
        return {"every": "auto", **chosen, **bounds, "unable": self.unable or None}
