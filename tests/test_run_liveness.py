"""A run's rows are never lost to a run that is still alive. A run stopped with SIGSTOP (Ctrl-Z, a paused VM)
lets its heartbeat go stale; it still holds its lock, so ``fedsim runs`` lists it as running and ``--delete``
is refused; once it is killed the delete goes through, and resuming the deleted run lists it again (one
warning) instead of writing rounds no listed run owns. The store is read with sqlite3."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from fedsim.cli import main
from fedsim.config.saved import saved_config
from fedsim.runstore import RunStore
from fedsim.sim.persist.checkpoint import complete
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config


def _rounds(db: Path) -> int:
    try:
        with sqlite3.connect(db) as con:
            return int(con.execute("SELECT COUNT(*) FROM rounds").fetchone()[0])
    except sqlite3.Error:
        return 0


def _exit(argv: list[str]) -> int:
    """``fedsim ARGV``'s exit code, returned or raised."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


@pytest.mark.slow
def test_a_paused_run_is_listed_running_and_kept_until_its_process_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny_config(rounds=10_000, eval_every=0, checkpoint={"every": 2})))
    out, db = tmp_path / "out", tmp_path / "runs.db"
    argv = [sys.executable, "-m", "fedsim.cli", "run", str(config), "--out", str(out), "--db", str(db)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while _rounds(db) < 3 or not complete(out / "checkpoints"):
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it was paused"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGSTOP)
        monkeypatch.setenv("FEDSIM_DEAD_AFTER_S", "0.001")  # every heartbeat is stale now
        with RunStore.open_readonly(db) as store:
            (run,) = store.list_runs()
        assert run.status == "running"  # not "failed": its process lives
        assert _exit(["runs", "--db", str(db), "--delete", run.run_id]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "still under way" in err and f"pid {proc.pid}" in err, err
        assert _rounds(db) >= 3  # nothing went
        assert _exit(["resume", str(out), "--db", str(db)]) == 2  # nor is it resumed beside itself
        assert "still under way" in capsys.readouterr().err
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    with RunStore.open_readonly(db) as store:
        assert store.get_run(run.run_id).status == "failed"  # type: ignore[union-attr]
    assert main(["runs", "--db", str(db), "--delete", run.run_id]) == 0
    capsys.readouterr()
    assert _rounds(db) == 0 and not any((db.parent / ".runs.db.live").iterdir())
    engine = Engine(saved_config(out), out_dir=out, db_path=db, resume=True)  # one round of it, then stop
    engine.run(after_round=lambda row: True)
    err = capsys.readouterr().err
    assert f"run {run.run_id} was not in the run store {db}: listed again from its checkpoint" in err, err
    with RunStore.open_readonly(db) as store:
        (again,) = store.list_runs()
        assert again.run_id == run.run_id and len(store.rounds(run.run_id)) == 1  # the rounds it wrote are its
