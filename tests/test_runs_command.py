"""`fedsim runs` filters, limits and deletes, and every command and script finds the run store through
$FEDSIM_DB when it is set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedsim import Simulation, read_run
from fedsim.cli import main
from fedsim.runstore import RunStore
from tests.conftest import tiny_config


def _run(name: str, db: Path | None, out: Path) -> str:
    summary = Simulation(tiny_config(name=name, rounds=1, format=2), out=out / name, db=db).run()
    return summary.run_id


def test_runs_filters_by_name_and_status_limits_and_deletes_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "runs.db"
    first, second = _run("alpha", db, tmp_path), _run("beta", db, tmp_path)
    assert main(["runs", "--db", str(db), "--name", "alph"]) == 0
    listed = capsys.readouterr().out
    assert first in listed and second not in listed
    assert main(["runs", "--db", str(db), "--limit", "1", "--json"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)] == [second]  # the newest
    assert main(["runs", "--db", str(db), "--status", "failed"]) == 0
    assert capsys.readouterr().out.strip() == f"no runs in {db} match"
    assert main(["runs", "--db", str(db), "--delete", first]) == 0
    assert f"deleted run {first}" in capsys.readouterr().out
    with RunStore.open_readonly(db) as store:
        assert [r.run_id for r in store.list_runs()] == [second] and store.rounds(first) == []
    assert (tmp_path / "alpha" / "summary.json").is_file()  # the run's files stay
    with pytest.raises(SystemExit, match="2"):
        main(["runs", "--db", str(db), "--delete", first])
    assert capsys.readouterr().err.strip() == f"fedsim: error: no run {first} in {db}"


def test_fedsim_db_names_the_run_store_for_scripts_and_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FEDSIM_DB", str(tmp_path / "elsewhere" / "store.db"))
    run_id = _run("gamma", None, tmp_path)
    assert (tmp_path / "elsewhere" / "store.db").is_file() and not (tmp_path / "runs").exists()
    assert len(read_run(run_id)) == 1
    assert main(["runs"]) == 0
    assert run_id in capsys.readouterr().out
