"""Placing runs on a pool of device types, in virtual time: Gavel's round-based mechanism and the LPT baseline.

``throughputs[m, j]`` is run ``m``'s rounds per second on one device of type ``j``, ``steps[m]`` the rounds it
must train, ``counts[j]`` the devices of type ``j``. Each run needs one device at a time.

- :func:`round_based` (Gavel, Section 5): time goes in scheduling rounds of ``round_s`` seconds. Before each, every
  (run, type) pair gets the priority ``X[m, j] / share[m, j]``, the share of time the allocation ``X`` asks for
  over the share of rounds the run has had on that type so far (infinite before its first), and runs take
  devices in decreasing priority, one device each; a run then trains at its throughput on that type for the
  round, or until it is done. Runs with no share left (``X = 0``) take devices nobody with a share wants, the
  best type for them first, so no device idles while a run waits.
- :func:`lpt` (heterogeneity-agnostic): longest run first (by ``lengths``, its seconds on a reference device, or
  its rounds), each to the device that frees first, run to completion there, whatever its type.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Schedule:
    """Each run's start and finish (virtual seconds) and, per scheduling round, the (run, device) pairs placed
    (LPT: one entry, all its placements). ``devices[d]`` is device d's type."""

    start_s: np.ndarray
    finish_s: np.ndarray
    devices: list[int]
    placements: list[list[tuple[int, int]]] = field(default_factory=list)
    progress: list[np.ndarray] = field(default_factory=list)  # per scheduling round: each run's rounds done

    @property
    def makespan_s(self) -> float:
        return float(self.finish_s.max())

    @property
    def mean_completion_s(self) -> float:
        return float(self.finish_s.mean())


def pool_devices(counts: np.ndarray) -> list[int]:
    """Device index -> its type, types in order."""
    return [j for j, count in enumerate(np.asarray(counts, dtype=int)) for _ in range(count)]


def round_based(
    throughputs: np.ndarray, steps: np.ndarray, counts: np.ndarray, shares: np.ndarray, round_s: float
) -> Schedule:
    t, work, x = (np.asarray(a, dtype=float) for a in (throughputs, steps, shares))
    if round_s <= 0:
        raise ValueError(f"round_s must be positive, got {round_s}")
    runs, types = t.shape
    devices = pool_devices(counts)
    left = work.copy()
    rounds_on = np.zeros((runs, types))
    start, finish = np.full(runs, np.nan), np.zeros(runs)
    placements: list[list[tuple[int, int]]] = []
    progress: list[np.ndarray] = []
    now, elapsed = 0.0, 0
    while (left > 1e-9).any():
        share = rounds_on / max(elapsed, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            priority = np.where(share > 0, x / share, np.where(x > 0, np.inf, 0.0))
        pairs = sorted(
            ((m, j) for m in range(runs) for j in range(types) if left[m] > 1e-9),
            key=lambda p: (-priority[p], -t[p], p),  # by priority; the faster type breaks ties, then the order
        )
        free = {j: [d for d, kind in enumerate(devices) if kind == j] for j in range(types)}
        placed: list[tuple[int, int]] = []
        taken: set[int] = set()
        for m, j in pairs:
            if m in taken or not free[j] or t[m, j] <= 0:
                continue
            device = free[j].pop(0)
            taken.add(m)
            placed.append((m, device))
            if np.isnan(start[m]):
                start[m] = now
            done = min(left[m], t[m, j] * round_s)
            if done >= left[m] - 1e-9:
                finish[m] = now + left[m] / t[m, j]
            left[m] -= done
            rounds_on[m, j] += 1
        if not placed:
            raise ValueError("no run can be placed: every remaining run has zero throughput on the free types")
        placements.append(placed)
        progress.append(work - np.maximum(left, 0.0))
        now += round_s
        elapsed += 1
    return Schedule(start, finish, devices, placements, progress)


def lpt(throughputs: np.ndarray, steps: np.ndarray, counts: np.ndarray, lengths: np.ndarray | None = None) -> Schedule:
    t, work = np.asarray(throughputs, dtype=float), np.asarray(steps, dtype=float)
    size = work if lengths is None else np.asarray(lengths, dtype=float)
    devices = pool_devices(counts)
    free_at = np.zeros(len(devices))
    start, finish = np.zeros(len(work)), np.zeros(len(work))
    placed: list[tuple[int, int]] = []
    for m in sorted(range(len(work)), key=lambda m: (-size[m], m)):  # longest first
        device = int(np.argmin(free_at))  # the first to free; the lowest index among equals
        kind = devices[device]
        if t[m, kind] <= 0:
            raise ValueError(f"run {m} has zero throughput on device type {kind}: LPT cannot place it there")
        start[m] = free_at[device]
        finish[m] = free_at[device] = start[m] + work[m] / t[m, kind]
        placed.append((m, device))
    return Schedule(start, finish, devices, [placed])
