"""The SQLite run store: WAL, one transaction per round, incremental reads, clear errors."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from fedsim.runstore import ClientRow, RoundRow, RunStore, RunStoreError
from tests.conftest import wait_until


def _round(run_id: str, r: int, acc: float | None = None) -> RoundRow:
    return RoundRow(run_id, r, 1.0 / (r + 1), acc, None, 100 * r, 200 * r, 0.5, 0.4, 64, 10)


def test_wal_round_trip_and_incremental_reads(tmp_path: Path) -> None:
    db = tmp_path / "nested" / "fedsim.db"
    with RunStore(db) as store:
        assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        first = store.start_run("a", "simulation", {"rounds": 3}, rounds_planned=3)
        second = store.start_run("b", "split", {}, rounds_planned=1)
        clients = [ClientRow(first, 0, c, 0, 10.0 + c, 10.5 + c, 64, 0.3) for c in range(1000)]
        store.log_round(first, _round(first, 0), clients)
        store.log_round(first, _round(first, 1, acc=0.9), [])
        store.finish_run(first, "finished", {"final_accuracy": 0.9})
        assert [r.run_id for r in store.list_runs()] == [second, first]
        assert [r.round for r in store.rounds(first, after_round=0)] == [1]
        assert store.rounds(first)[1].test_accuracy == 0.9
        assert len(store.client_runs(first, round=0)) == 1000
        info = store.get_run(first)
        assert info is not None and info.status == "finished" and info.rounds_done == 2
        assert info.summary == {"final_accuracy": 0.9} and info.config == {"rounds": 3}


def test_reader_sees_committed_rounds_while_a_write_is_open(tmp_path: Path) -> None:
    db = tmp_path / "fedsim.db"
    writer = RunStore(db)
    run = writer.start_run("live", "simulation", {}, rounds_planned=5)
    writer.log_round(run, _round(run, 0), [])
    writer._db.execute("BEGIN IMMEDIATE")
    writer._db.execute("INSERT INTO rounds VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", tuple(vars(_round(run, 1)).values()))
    with RunStore.open_readonly(db) as reader:
        assert [r.round for r in reader.rounds(run)] == [0]  # the open transaction is invisible, not blocking
    writer._db.commit()
    with RunStore.open_readonly(db) as reader:
        assert [r.round for r in reader.rounds(run)] == [0, 1]
    writer.close()


def test_bad_values_and_paths(tmp_path: Path) -> None:
    with pytest.raises(RunStoreError, match=r"run store not found: .*missing\.db"):
        RunStore.open_readonly(tmp_path / "missing.db")
    with RunStore(tmp_path / "x.db") as store:
        with pytest.raises(ValueError, match="unknown run kind 'batch'; allowed: simulation, split"):
            store.start_run("a", "batch", {}, 1)
        run = store.start_run("a", "simulation", {}, 1)
        with pytest.raises(ValueError, match="unknown run status 'done'"):
            store.finish_run(run, "done", None)
    newer = tmp_path / "newer.db"
    sqlite3.connect(newer).execute("PRAGMA user_version=99").connection.close()
    with pytest.raises(RunStoreError, match="schema version 99"):
        RunStore.open_readonly(newer)


@pytest.mark.slow
def test_a_run_whose_process_died_shows_as_failed_once_its_heartbeat_lapses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import signal
    import subprocess
    import sys

    db = tmp_path / "runs.db"
    script = (
        "import sys, time; from fedsim.runstore import RunStore\n"
        f"store = RunStore({str(db)!r}); print(store.start_run('doomed', 'simulation', {{}}, 10), flush=True)\n"
        "time.sleep(600)\n"
    )
    env = {**os.environ, "FEDSIM_HEARTBEAT_S": "0.1"}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    run_id = proc.stdout.readline().strip()
    monkeypatch.setenv("FEDSIM_DEAD_AFTER_S", "1.5")

    def status() -> str:
        with RunStore.open_readonly(db) as store:
            info = store.get_run(run_id)
        assert info is not None
        return info.status

    def beat() -> float:
        with sqlite3.connect(db) as raw:
            return float(raw.execute("SELECT heartbeat FROM runs").fetchone()[0])

    first = beat()
    wait_until(lambda: beat() > first + 1, "the heartbeat to go on for a second")
    assert status() == "running"  # alive: its heartbeat is fresh
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    wait_until(lambda: status() == "failed", "the dead run shown as failed", timeout=30)
    listed = subprocess.run(
        [sys.executable, "-m", "fedsim.cli", "runs", "--db", str(db)], capture_output=True, text=True, check=True
    )
    assert f"{run_id}" in listed.stdout and "failed" in listed.stdout.splitlines()[1]
