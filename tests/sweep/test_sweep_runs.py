"""``fedsim sweep``: the grid expands into valid runs, a bad sweep is one line, and a sweep trains every run into
the run store with its placement in sweep.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fedsim.cli import main
from fedsim.config import ConfigError
from fedsim.runstore import RunStore, sweep_member, sweep_of
from fedsim.sweep.grid import load_sweep
from tests.conftest import tiny_config


def write_sweep(tmp_path: Path, **fields: Any) -> Path:
    run = tiny_config(rounds=3, clients_per_round=4)
    sweep = {
        "name": "mini",
        "run": run,
        "grid": {"model": [{"kind": "logistic"}, {"kind": "mlp", "hidden": [16]}], "seed": [0, 1]},
        "types": {"fast": 1, "slow": 1},
        "speed": {"mlp": {"fast": 1.0, "slow": 0.25}, "logistic": {"slow": 0.8}},
        "round_s": 0.01,
        "measure_rounds": 1,
    } | fields
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def test_the_grid_expands_into_named_valid_runs(tmp_path: Path) -> None:
    cfg, runs = load_sweep(write_sweep(tmp_path))
    assert [r.label for r in runs] == [
        "model=logistic,seed=0",
        "model=logistic,seed=1",
        "model=mlp,seed=0",
        "model=mlp,seed=1",
    ]
    assert [r.cfg.seed for r in runs] == [0, 1, 0, 1] and runs[2].cfg.model.kind == "mlp"
    assert [sweep_of(r.cfg.name) for r in runs] == ["mini"] * 4
    assert runs[3].cfg.name == "mini.g03-modelmlp_seed1"
    assert cfg.factor("mlp", "slow") == 0.25 and cfg.factor("logistic", "fast") == 1.0


def test_sweep_names_round_trip() -> None:
    assert sweep_of(sweep_member("grid-1", 7, "lr0.1")) == "grid-1"
    assert sweep_of("quickstart-lr0.1") is None


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"grid": {"algorithm.lr": [0.1, -1.0]}}, r"grid point 1 \(lr=-1.0\): algorithm.lr"),
        ({"speed": {"mlp": {"tpu": 2.0}}}, "speed.mlp.tpu: no device type 'tpu' in types"),
        ({"types": {"fast": 0}}, "types: each device type needs a count from 1 to 10000"),
        ({"policy": "fifo"}, "policy"),
    ],
)
def test_a_bad_sweep_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fields: dict[str, Any], words: str
) -> None:
    path = write_sweep(tmp_path, **fields)
    with pytest.raises(ConfigError, match=words):
        load_sweep(path)
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", str(path), "--out", str(tmp_path / "out"), "--db", str(tmp_path / "runs.db")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs.db").exists()


@pytest.mark.parametrize("policy", ["min_makespan", "lpt"])
def test_a_sweep_trains_every_run_into_the_store(tmp_path: Path, policy: str) -> None:
    out, db = tmp_path / "out", tmp_path / "runs.db"
    assert main(["sweep", str(write_sweep(tmp_path)), "--policy", policy, "--out", str(out), "--db", str(db)]) == 0
    report = json.loads((out / "sweep.json").read_text())
    assert report["policy"] == policy and len(report["runs"]) == 4
    assert report["makespan_s"] == pytest.approx(max(r["finish_s"] for r in report["runs"]))
    with RunStore(db) as store:
        for run in report["runs"]:
            info = store.get_run(run["run_id"])
            assert info is not None and info.status == "finished" and info.name == run["name"]
            assert [r.round for r in store.rounds(run["run_id"])] == [0, 1, 2]
            assert run["final_accuracy"] == pytest.approx(info.summary["final_accuracy"])  # type: ignore[index]
    slow_mlp = [r for r in report["runs"] if "mlp" in r["name"]]
    assert all(r["rounds_per_s"]["slow"] == pytest.approx(r["rounds_per_s"]["fast"] / 4) for r in slow_mlp)
