"""The run store: SQLite in WAL mode, written by the engine only, read live by the dashboard.

WAL lets readers see committed rounds while the engine keeps writing; each round is one transaction, so a
reader never sees half a round. The schema version is ``PRAGMA user_version``.

A writer beats a heartbeat for every run it has under way (a thread with its own connection, every
``FEDSIM_HEARTBEAT_S`` seconds, 10 by default); a reader shows a run that says "running" but whose heartbeat
is older than ``FEDSIM_DEAD_AFTER_S`` (60) as ``failed``: its process died without a word (SIGKILL, power).
A run whose process holds its lock (:mod:`fedsim.runstore.liveness`) shows as running however old its heartbeat
(a stopped process: Ctrl-Z, a paused VM), and cannot be deleted.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import astuple, fields
from operator import attrgetter
from pathlib import Path
from types import TracebackType
from typing import Any

from fedsim.runstore.liveness import RunLocks, forget, holder
from fedsim.runstore.rows import (
    _SCHEMA,
    KINDS,
    LIVE,
    RELAX_SAMPLES,
    SCHEMA_VERSION,
    STATUSES,
    ClientRow,
    DecisionRow,
    DeviceRow,
    MemberRow,
    RoundRow,
    RunInfo,
    RunStoreError,
    check_allowed,
    default_db,
    env_seconds,
    headline,
    sweep_member,
    sweep_of,
)

__all__ = [
    "KINDS",
    "LIVE",
    "SCHEMA_VERSION",
    "STATUSES",
    "ClientRow",
    "DecisionRow",
    "DeviceRow",
    "MemberRow",
    "RoundRow",
    "RunInfo",
    "RunStore",
    "RunStoreError",
    "default_db",
    "headline",
    "sweep_member",
    "sweep_of",
]


class RunStore:
    """Writer (and reader) of one SQLite run store; use :meth:`open_readonly` to only read."""

    def __init__(self, path: Path | str = "runs/fedsim.db", *, _readonly: bool = False) -> None:
        self.path = Path(path)
        self._readonly = _readonly
        self._has_heartbeat = True
        if _readonly:
            if not self.path.is_file():
                raise RunStoreError(f"run store not found: {self.path}")
            self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
            try:
                version = self._db.execute("PRAGMA user_version").fetchone()[0]
            except sqlite3.DatabaseError as exc:
                self._db.close()
                raise RunStoreError(f"cannot read run store {self.path}: {exc}") from None
            if version > SCHEMA_VERSION:
                raise RunStoreError(
                    f"run store {self.path} has schema version {version}; this fedsim reads up to "
                    f"{SCHEMA_VERSION}: upgrade fedsim"
                )
            try:
                self._has_heartbeat = "heartbeat" in self._columns()
            except sqlite3.DatabaseError:  # no runs table yet: list_runs reports it
                self._has_heartbeat = False
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False)  # writers serialise their own calls
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            with self._db:
                if self._db.execute("PRAGMA user_version").fetchone()[0] < 4:
                    self._relax_samples()
                self._db.executescript(_SCHEMA)
                if "heartbeat" not in self._columns():
                    self._db.execute("ALTER TABLE runs ADD COLUMN heartbeat REAL")
                self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except (sqlite3.Error, OSError) as exc:
            raise RunStoreError(f"cannot open run store {self.path}: {exc}") from None
        self._locks = RunLocks(self.path)  # held while a run of this writer is under way
        self._beating: set[str] = set()
        self._beat_lock = threading.Lock()
        self._stop_beating = threading.Event()
        self._beater: threading.Thread | None = None

    def _relax_samples(self) -> None:
        """Let an older store's rows hold no samples (schema 4), copying each table that still requires them."""
        for table, script in RELAX_SAMPLES.items():
            columns = {row[1]: row[3] for row in self._db.execute(f"PRAGMA table_info({table})")}
            if columns.get("samples"):  # notnull
                for statement in filter(str.strip, script.split(";")):
                    self._db.execute(statement)

    def _columns(self) -> set[str]:
        return {row[1] for row in self._db.execute("PRAGMA table_info(runs)")}

    def _beat(self, run_id: str) -> None:
        """Keep ``run_id``'s heartbeat fresh from a thread of its own until it finishes or the store closes."""
        with self._beat_lock:
            self._beating.add(run_id)
            if self._beater is None:
                self._beater = threading.Thread(target=self._beat_loop, name="fedsim-heartbeat", daemon=True)
                self._beater.start()

    def _beat_loop(self) -> None:
        every = env_seconds("FEDSIM_HEARTBEAT_S", 10.0)
        db = sqlite3.connect(self.path, timeout=30)
        try:
            while not self._stop_beating.wait(every):
                with self._beat_lock:
                    beating = list(self._beating)
                with db:
                    db.executemany(
                        "UPDATE runs SET heartbeat = ? WHERE run_id = ?", [(time.time(), r) for r in beating]
                    )
        except sqlite3.Error:
            return  # the store went away: readers will see the run as dead, which it then is
        finally:
            db.close()

    @classmethod
    def open_readonly(cls, path: Path | str) -> RunStore:
        return cls(path, _readonly=True)

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        if not self._readonly:
            self._stop_beating.set()
            if self._beater is not None:
                self._beater.join()
            self._locks.drop_all()
        self._db.close()

    # ------------------------------------------------------------------------------------------- writing

    def start_run(self, name: str, kind: str, config: dict[str, Any], rounds_planned: int) -> str:
        """Insert a running run and return its id, ``NAME-YYYYmmdd-HHMMSS-XXXX``."""
        check_allowed(kind, KINDS, "kind")
        now = time.time()
        run_id = f"{name}-{time.strftime('%Y%m%d-%H%M%S', time.localtime(now))}-{secrets.token_hex(2)}"
        with self._db:
            self._db.execute(
                "INSERT INTO runs (run_id, name, kind, status, config_json, started_at, rounds_planned, heartbeat)"
                " VALUES (?, ?, ?, 'running', ?, ?, ?, ?)",
                (run_id, name, kind, json.dumps(config, sort_keys=True), now, rounds_planned, now),
            )
        self._locks.take(run_id)
        self._beat(run_id)
        return run_id

    def list_again(self, run_id: str, name: str, config: dict[str, Any], rounds_planned: int) -> None:
        """List ``run_id`` again (a simulation resumed into a store that lost it), status ``resumed``."""
        now = time.time()
        with self._db:
            self._db.execute(
                "INSERT OR IGNORE INTO runs (run_id, name, kind, status, config_json, started_at, rounds_planned,"
                " heartbeat) VALUES (?, ?, 'simulation', 'resumed', ?, ?, ?, ?)",
                (run_id, name, json.dumps(config, sort_keys=True), now, rounds_planned, now),
            )

    def log_round(
        self, run_id: str, row: RoundRow, clients: Sequence[ClientRow], devices: Sequence[DeviceRow] = ()
    ) -> None:
        """Write one round, its client rows and its device rows in one transaction."""
        with self._db:
            self._db.executemany(
                f"INSERT OR REPLACE INTO device_rounds VALUES ({', '.join('?' * len(fields(DeviceRow)))})",
                map(_DEVICE_VALUES, devices),
            )
            self._db.execute(
                f"INSERT OR REPLACE INTO rounds VALUES ({', '.join('?' * len(fields(RoundRow)))})",
                astuple(row),
            )
            self._db.executemany(
                f"INSERT INTO client_runs VALUES ({', '.join('?' * len(fields(ClientRow)))})",
                map(_CLIENT_VALUES, clients),
            )

    def add_round_metrics(self, run_id: str, round: int, metrics: dict[str, float]) -> None:
        """Merge ``metrics`` (a callback's) into round ``round``'s ``metrics_json``, in one transaction."""
        with self._db:
            found = self._db.execute(
                "SELECT metrics_json FROM rounds WHERE run_id = ? AND round = ?", (run_id, round)
            ).fetchone()
            if found is None:
                raise ValueError(f"run {run_id} has no round {round} to add metrics to")
            merged = {**json.loads(found[0]), **metrics}
            self._db.execute(
                "UPDATE rounds SET metrics_json = ? WHERE run_id = ? AND round = ?", (json.dumps(merged), run_id, round)
            )

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any] | None) -> None:
        check_allowed(status, STATUSES, "status")
        with self._beat_lock:
            self._beating.discard(run_id)
        with self._db:
            self._db.execute(
                "UPDATE runs SET status = ?, ended_at = ?, summary_json = ? WHERE run_id = ?",
                (status, time.time(), None if summary is None else json.dumps(summary), run_id),
            )
        self._locks.drop(run_id)
        forget(self.path, run_id)

    def delete_run(self, run_id: str) -> int:
        """Remove ``run_id`` and every row it wrote (rounds, client turns, devices, decisions, members); returns
        how many rows went. A run whose process lives is refused, also when its heartbeat is stale (a stopped or
        paused process): it would write again, into rows no listed run owns."""
        info = self.get_run(run_id)
        if info is None:
            raise RunStoreError(f"no run {run_id} in {self.path}")
        if who := holder(self.path, run_id):
            raise RunStoreError(
                f"run {run_id} is still under way ({who}; stopped or paused?): stop it before deleting it"
            )
        if info.status in LIVE:
            raise RunStoreError(f"run {run_id} is {info.status}: stop it before deleting it")
        with self._db:
            gone = sum(
                self._db.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,)).rowcount
                for table in ("rounds", "client_runs", "device_rounds", "decisions", "members", "runs")
            )
        forget(self.path, run_id)
        return gone

    def log_decision(self, row: DecisionRow) -> None:
        with self._db:
            self._db.execute(
                f"INSERT OR REPLACE INTO decisions VALUES ({', '.join('?' * len(fields(DecisionRow)))})", astuple(row)
            )

    def log_members(self, rows: Sequence[MemberRow]) -> None:
        with self._db:
            self._db.executemany(
                f"INSERT OR REPLACE INTO members VALUES ({', '.join('?' * len(fields(MemberRow)))})",
                (astuple(r) for r in rows),
            )

    def truncate_after(self, run_id: str, round: int) -> None:
        """Drop every row of rounds after ``round``: a resumed run replays them from its checkpoint."""
        with self._db:
            for table in ("rounds", "client_runs", "device_rounds", "decisions", "members"):
                self._db.execute(f"DELETE FROM {table} WHERE run_id = ? AND round > ?", (run_id, round))

    def set_status(self, run_id: str, status: str) -> None:
        check_allowed(status, STATUSES, "status")
        with self._db:
            self._db.execute(
                "UPDATE runs SET status = ?, heartbeat = ? WHERE run_id = ?", (status, time.time(), run_id)
            )
        if status in LIVE:
            self._locks.take(run_id)
            self._beat(run_id)

    # ------------------------------------------------------------------------------------------- reading

    def schema_version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    @contextmanager
    def snapshot(self) -> Iterator[RunStore]:
        """Reads inside see one consistent state of the store, whatever a writer commits meanwhile (WAL)."""
        self._db.execute("BEGIN")
        try:
            yield self
        finally:
            self._db.execute("COMMIT")

    def list_runs(self) -> list[RunInfo]:
        """Every run, newest first."""
        return [self._run_info(r) for r in self._runs_query("ORDER BY started_at DESC, run_id DESC", ())]

    def get_run(self, run_id: str) -> RunInfo | None:
        rows = self._runs_query("WHERE run_id = ?", (run_id,))
        return self._run_info(rows[0]) if rows else None

    def rounds(self, run_id: str, after_round: int = -1) -> list[RoundRow]:
        """Rounds of ``run_id`` numbered above ``after_round``, in order (a live reader fetches increments)."""
        cur = self._db.execute(
            "SELECT * FROM rounds WHERE run_id = ? AND round > ? ORDER BY round", (run_id, after_round)
        )
        return [RoundRow(*r) for r in cur.fetchall()]

    def client_runs(self, run_id: str, round: int | None = None, after_round: int = -1) -> list[ClientRow]:
        """One round's client turns, or every turn of the rounds numbered above ``after_round``."""
        if round is None:
            cur = self._db.execute(
                "SELECT * FROM client_runs WHERE run_id = ? AND round > ? ORDER BY round, start", (run_id, after_round)
            )
        else:
            cur = self._db.execute(
                "SELECT * FROM client_runs WHERE run_id = ? AND round = ? ORDER BY start", (run_id, round)
            )
        return [ClientRow(*r) for r in cur.fetchall()]

    def device_rounds(self, run_id: str, after_round: int = -1) -> list[DeviceRow]:
        cur = self._db.execute(
            "SELECT * FROM device_rounds WHERE run_id = ? AND round > ? ORDER BY round, device", (run_id, after_round)
        )
        return [DeviceRow(*r) for r in cur.fetchall()]

    def decisions(self, run_id: str, after_round: int = -1) -> list[DecisionRow]:
        try:
            cur = self._db.execute(
                "SELECT * FROM decisions WHERE run_id = ? AND round > ? ORDER BY round", (run_id, after_round)
            )
        except sqlite3.OperationalError:  # a version-1 store opened read-only has no decisions table
            return []
        return [DecisionRow(*r) for r in cur.fetchall()]

    def members(self, run_id: str, after_seq: int = -1) -> list[MemberRow]:
        try:
            cur = self._db.execute(
                "SELECT * FROM members WHERE run_id = ? AND seq > ? ORDER BY seq", (run_id, after_seq)
            )
        except sqlite3.OperationalError:  # a store of schema < 3 opened read-only has no members table
            return []
        return [MemberRow(*r) for r in cur.fetchall()]

    def _runs_query(self, tail: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        sql = (
            "SELECT r.run_id, r.name, r.kind, r.status, r.config_json, r.started_at, r.ended_at,"
            " r.rounds_planned, (SELECT COUNT(*) FROM rounds d WHERE d.run_id = r.run_id), r.summary_json, "
            + ("r.heartbeat" if self._has_heartbeat else "NULL")
            + f" FROM runs r {tail}"
        )
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise RunStoreError(f"cannot read run store {self.path}: {exc}") from None

    def _run_info(self, row: tuple[Any, ...]) -> RunInfo:
        run_id, name, kind, status, config, started, ended, planned, done, summary, heartbeat = row
        dead_after = env_seconds("FEDSIM_DEAD_AFTER_S", 60)
        stale = status in LIVE and heartbeat is not None and time.time() - heartbeat > dead_after
        if stale and holder(self.path, run_id) is None:
            status = "failed"  # its process died without a word: it will never finish (a paused one keeps its lock)
        return RunInfo(
            run_id,
            name,
            kind,
            status,
            json.loads(config),
            started,
            ended,
            planned,
            done,
            json.loads(summary) if summary else None,
        )


def _values(row_type: type) -> Callable[[Any], tuple[Any, ...]]:
    """A row's field values in column order, as a tuple (rows hold flat values: no deep copy needed)."""
    names = [f.name for f in fields(row_type)]
    get = attrgetter(*names)
    return (lambda row: (get(row),)) if len(names) == 1 else get


# attrgetter of the fields, not astuple: astuple deep-copies every field (~27 us a client row)
_DEVICE_VALUES, _CLIENT_VALUES = _values(DeviceRow), _values(ClientRow)
