"""What the dashboard reads, and how it reads it live without re-reading the database.

The run store is SQLite in WAL mode: the dashboard opens it read-only and can read while a run writes. A
:class:`LiveRun` remembers the last round it has seen of each table and asks only for rows after it, so a
refresh every few seconds costs what the run wrote since, not the whole run. Every condition a user can
meet (no store at that path, a file that is not a run store, a store from a newer fedsim, an empty store, a
run without rounds yet) becomes a :class:`StoreProblem` with a sentence to show, never a traceback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedsim.runstore import (
    SCHEMA_VERSION,
    ClientRow,
    DecisionRow,
    DeviceRow,
    MemberRow,
    RoundRow,
    RunInfo,
    RunStore,
    RunStoreError,
)


class StoreProblem(RuntimeError):
    """A store the dashboard cannot show; ``str()`` is the message for the user."""


def open_store(path: Path) -> RunStore:
    """The store at ``path``, read-only; :class:`StoreProblem` naming the path otherwise."""
    if not path.exists():
        raise StoreProblem(f"No run store at {path}. Run `fedsim run examples/quickstart.yaml` to create one.")
    try:
        store = RunStore.open_readonly(path)
    except RunStoreError as exc:
        raise StoreProblem(f"{path} cannot be read as a fedsim run store: {exc}") from None
    if store.schema_version() < 1:  # a cheap check: refreshes must not scan the store
        store.close()
        raise StoreProblem(f"{path} cannot be read as a fedsim run store: it has no fedsim schema")
    return store


def list_runs(path: Path) -> list[RunInfo]:
    with open_store(path) as store:
        runs = store.list_runs()
    if not runs:
        raise StoreProblem(f"The run store {path} has no runs yet. Start one with `fedsim run` or `fedsim split`.")
    return runs


def schema_note(path: Path) -> str | None:
    """A sentence when the store was written by an older fedsim (some panels may be empty), else None."""
    with open_store(path) as store:
        version = store.schema_version()
    if version < SCHEMA_VERSION:
        return (
            f"This store was written by an older fedsim (schema {version}, now {SCHEMA_VERSION}): "
            "SkewScout or edge-membership panels may stay empty."
        )
    return None


@dataclass
class LiveRun:
    """One run's rows, fetched incrementally: :meth:`refresh` returns how many new rounds arrived."""

    path: Path
    run_id: str
    info: RunInfo | None = None
    rounds: list[RoundRow] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)  # each round's metrics_json, parsed once
    clients: list[ClientRow] = field(default_factory=list)
    devices: list[DeviceRow] = field(default_factory=list)
    decisions: list[DecisionRow] = field(default_factory=list)
    members: list[MemberRow] = field(default_factory=list)  # a split service's devices coming and going

    @property
    def last_round(self) -> int:
        return self.rounds[-1].round if self.rounds else -1

    def refresh(self) -> int:
        with open_store(self.path) as opened, opened.snapshot() as store:  # one consistent state per refresh
            self.info = store.get_run(self.run_id)
            if self.info is None:
                raise StoreProblem(f"Run {self.run_id} is not in {self.path}.")
            after = self.last_round
            new = store.rounds(self.run_id, after_round=after)
            # client and device rows of a round are written in the round's transaction, with its row
            self.clients += store.client_runs(self.run_id, after_round=after)
            self.devices += store.device_rounds(self.run_id, after_round=after)
            last_decision = self.decisions[-1].round if self.decisions else -1
            self.decisions += store.decisions(self.run_id, after_round=last_decision)
            self.members += store.members(self.run_id, after_seq=self.members[-1].seq if self.members else -1)
        self.rounds += new
        self.metrics += [json.loads(r.metrics_json) for r in new]
        return len(new)
