"""The run store's schema and its typed rows: a run, a round, a client's turn, a device's round, a SkewScout
decision, a split device's membership change."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 4  # 2: decisions (SkewScout); 3: members (split devices that come and go); 4: samples may be
# NULL (withheld under DP: a statistic of the clients' data)
KINDS = ("simulation", "split")
STATUSES = ("running", "finished", "failed", "resumed", "interrupted", "diverged")  # interrupted: SIGINT/SIGTERM
LIVE = ("running", "resumed")  # statuses of a run under way: they need a heartbeat


def env_seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if 0 < value < float("inf") else default


_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, status TEXT NOT NULL,
    config_json TEXT NOT NULL, started_at REAL NOT NULL, ended_at REAL, rounds_planned INTEGER NOT NULL,
    summary_json TEXT, heartbeat REAL
);
CREATE TABLE IF NOT EXISTS rounds (
    run_id TEXT NOT NULL, round INTEGER NOT NULL, train_loss REAL, test_accuracy REAL, test_loss REAL,
    bytes_up INTEGER NOT NULL, bytes_down INTEGER NOT NULL, wall_s REAL NOT NULL, train_s REAL NOT NULL,
    samples INTEGER, clients INTEGER NOT NULL, metrics_json TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, round)
);
CREATE TABLE IF NOT EXISTS client_runs (
    run_id TEXT NOT NULL, round INTEGER NOT NULL, client INTEGER NOT NULL, device INTEGER NOT NULL,
    start REAL NOT NULL, "end" REAL NOT NULL, samples INTEGER, loss REAL
);
CREATE INDEX IF NOT EXISTS client_runs_round ON client_runs (run_id, round);
CREATE TABLE IF NOT EXISTS device_rounds (
    run_id TEXT NOT NULL, round INTEGER NOT NULL, device INTEGER NOT NULL, clients INTEGER NOT NULL,
    predicted_s REAL NOT NULL, actual_s REAL NOT NULL, PRIMARY KEY (run_id, round, device)
);
CREATE TABLE IF NOT EXISTS decisions (
    run_id TEXT NOT NULL, round INTEGER NOT NULL, knob TEXT NOT NULL, estimate REAL NOT NULL, old REAL NOT NULL,
    new REAL NOT NULL, action TEXT NOT NULL, probe_bytes INTEGER NOT NULL, gaps_json TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (run_id, round)
);
CREATE TABLE IF NOT EXISTS members (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, round INTEGER NOT NULL, at REAL NOT NULL, kind TEXT NOT NULL,
    device TEXT NOT NULL, partition INTEGER NOT NULL, PRIMARY KEY (run_id, seq)
);
"""


# Schema 3's tables held samples NOT NULL; SQLite changes a constraint by copying the table.
RELAX_SAMPLES = {
    table: f"""
ALTER TABLE {table} RENAME TO {table}_v3;
{_SCHEMA[_SCHEMA.index(f"CREATE TABLE IF NOT EXISTS {table} ") :].split(";")[0]};
INSERT INTO {table} SELECT * FROM {table}_v3;
DROP TABLE {table}_v3;
"""
    for table in ("rounds", "client_runs")
}


class RunStoreError(RuntimeError):
    """The run store cannot be opened or read; the message names the path."""


@dataclass
class RoundRow:
    """One round: losses, accuracy (None when not evaluated), bytes, wall/train seconds, samples, clients;
    ``train_loss`` and ``samples`` are None under DP unless ``privacy.diagnostics`` (they are the clients')."""

    run_id: str
    round: int
    train_loss: float | None
    test_accuracy: float | None
    test_loss: float | None
    bytes_up: int
    bytes_down: int
    wall_s: float
    train_s: float
    samples: int | None
    clients: int
    metrics_json: str = "{}"


@dataclass(frozen=True)
class ClientRow:
    """One client's turn: unix ``start``/``end`` seconds on ``device``, ``samples`` seen, mean ``loss`` (both None
    under DP unless ``privacy.diagnostics``)."""

    run_id: str
    round: int
    client: int
    device: int
    start: float
    end: float
    samples: int | None
    loss: float | None


@dataclass(frozen=True)
class DeviceRow:
    """A device's round: clients it trained, the scheduler's predicted and the (emulated) actual busy seconds."""

    run_id: str
    round: int
    device: int
    clients: int
    predicted_s: float
    actual_s: float


@dataclass(frozen=True)
class DecisionRow:
    """A SkewScout probe after ``round``: the smoothed loss ``estimate`` (points), the knob's old and new value,
    ``action`` (tighten, loosen, hold), the probe's bytes and its ``[[i, j, gap], ...]`` pairs."""

    run_id: str
    round: int
    knob: str
    estimate: float
    old: float
    new: float
    action: str
    probe_bytes: int
    gaps_json: str = "[]"


@dataclass(frozen=True)
class MemberRow:
    """The ``seq``-th membership change of a split service at its step ``round``: a device's ``kind`` of change
    (join, leave, lost, takeover, standby) at unix second ``at``, with the data ``partition`` (-1: none)."""

    run_id: str
    seq: int
    round: int
    at: float
    kind: str
    device: str
    partition: int


@dataclass(frozen=True)
class RunInfo:
    run_id: str
    name: str
    kind: str
    status: str
    config: dict[str, Any]
    started_at: float
    ended_at: float | None
    rounds_planned: int
    rounds_done: int
    summary: dict[str, Any] | None


def check_allowed(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise ValueError(f"unknown run {what} {value!r}; allowed: {', '.join(allowed)}")


def headline(summary: Mapping[str, Any]) -> tuple[str, str]:
    """A run's task and headline result from its summary, as ``fedsim runs`` and the dashboard show them:
    ``accuracy 0.9444``, ``mse 0.0353``, ``perplexity 3.21`` (a split run: its ``test_accuracy``); ``-`` where
    there is none yet (a run still going)."""
    task = str(summary.get("task", "classification" if "final_accuracy" in summary else "-"))
    metrics = summary.get("final_metrics")
    if isinstance(metrics, dict):
        named = {k: v for k, v in metrics.items() if k != "loss"}
        name, value = next(iter(named.items()), ("loss", metrics.get("loss")))
    else:
        name, value = "accuracy", summary.get("final_accuracy", summary.get("test_accuracy"))
    if not isinstance(value, int | float) or isinstance(value, bool):
        return task, "-"
    return task, f"{name} {value:.4g}"


SWEEP_MEMBER = re.compile(r"(?P<sweep>[A-Za-z0-9][A-Za-z0-9._-]*?)\.g(?P<index>\d{2,})(-|$)")


def sweep_member(sweep: str, index: int, label: str) -> str:
    """The name of run ``index`` of sweep ``sweep`` (``SWEEP.gNN-LABEL``, at most 100 characters): the run store
    keeps no other record of a sweep, so the dashboard finds a sweep's runs by this name (:func:`sweep_of`)."""
    head = f"{sweep}.g{index:02d}"
    return f"{head}-{label}"[:100].rstrip("-.") if label else head


def sweep_of(name: str) -> str | None:
    """The sweep a run belongs to, by its name; None for a run of its own."""
    found = SWEEP_MEMBER.match(name)
    return found.group("sweep") if found else None


def default_db() -> Path:
    """The run store a command or a script uses when none is named: ``$FEDSIM_DB`` when set, else
    ``runs/fedsim.db`` under the working directory."""
    return Path(os.environ.get("FEDSIM_DB") or "runs/fedsim.db")
