"""A run's rounds from Python (``Simulation.history``, ``fedsim.read_run``) and the shell (``fedsim runs --json``
and ``--csv``), checked against the run store and the configs the runs were given."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import fedsim
from fedsim import Simulation
from fedsim.cli import main
from fedsim.config import ConfigError
from fedsim.runstore import RunStore
from tests.conftest import tiny_config

PRIVATE = {"privacy": {"kind": "central", "clip": 1.0, "noise_multiplier": 1.0}}
ATTACKED = {"attack": {"kind": "backdoor", "fraction": 0.2, "scale": 3.0}, "aggregator": {"kind": "median"}}
COMPRESSED = {"uplink": {"kind": "qsgd", "levels": 4}}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Simulation]]:
    """A private, an attacked and a compressed run of 3 rounds in one run store, each with a callback metric."""
    tmp = tmp_path_factory.mktemp("store")
    sims = {}
    for name, section in (("private", PRIVATE), ("attacked", ATTACKED), ("compressed", COMPRESSED)):
        tree: dict[str, Any] = {**tiny_config(rounds=3, eval_every=2, name=name), **section}
        sim = Simulation(tree, out=tmp / name, db=tmp / "runs.db", callbacks=[lambda s, r: {"mine": r.round * 0.5}])
        assert sim.history.empty and list(sim.history.columns) == ["round"]  # nothing run yet
        sim.run()
        sims[name] = sim
    return tmp / "runs.db", sims


def test_history_has_a_row_per_round_with_the_stages_metrics(store: tuple[Path, dict[str, Simulation]]) -> None:
    db, sims = store
    private = sims["private"].history
    assert list(private["round"]) == [1, 2, 3] and list(private["mine"]) == [0.5, 1.0, 1.5]
    with RunStore.open_readonly(db) as runs:
        rows = runs.rounds(sims["private"].engine.run_id)
        attacked_rows = runs.rounds(sims["attacked"].engine.run_id)
    assert "train_loss" not in private and "samples" not in private  # under DP the clients' statistics are withheld
    assert list(sims["attacked"].history["train_loss"]) == [r.train_loss for r in attacked_rows]
    assert list(private["bytes_up"]) == [r.bytes_up for r in rows]
    assert private["test_accuracy"].isna().tolist() == [True, False, False]
    epsilon = list(private["epsilon"])
    assert 0 < epsilon[0] < epsilon[1] < epsilon[2]  # spent round by round
    summary = json.loads((sims["private"].out / "summary.json").read_text())
    assert epsilon[-1] == summary["privacy"]["epsilon"]
    attacked = sims["attacked"].history
    assert (attacked["malicious"] >= 0).all() and "backdoor_success" in attacked
    compressed = sims["compressed"].history
    assert (compressed["bytes_up"] < compressed["bytes_up_uncompressed"]).all()
    summary = json.loads((sims["compressed"].out / "summary.json").read_text())  # the run's, summed
    assert summary["bytes_up_uncompressed"] == compressed["bytes_up_uncompressed"].sum() > summary["bytes_up"]
    pd.testing.assert_frame_equal(fedsim.read_run(sims["compressed"].out, db), compressed)


def test_read_run_names_what_it_cannot_find(tmp_path: Path, store: tuple[Path, dict[str, Simulation]]) -> None:
    db, _ = store
    with pytest.raises(ConfigError, match="nosuch: no such run in"):
        fedsim.read_run("nosuch", db)
    with pytest.raises(ConfigError, match="not a fedsim run directory"):
        fedsim.read_run(tmp_path, db)


def test_runs_json_and_csv_fill_the_columns_of_each_run(
    store: tuple[Path, dict[str, Simulation]], capsys: pytest.CaptureFixture[str]
) -> None:
    db, sims = store
    assert main(["runs", "--db", str(db), "--json"]) == 0
    rows = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"private", "attacked", "compressed"}
    for name, row in rows.items():
        summary = json.loads((sims[name].out / "summary.json").read_text())
        assert row["status"] == "finished" and row["rounds"] == 3 and row["task"] == "classification"
        assert row["algorithm"] == "fedavg" and row["metric"] == "accuracy"
        assert row["final"] == summary["final_accuracy"] and row["bytes_up"] == summary["bytes_up"]
        assert row["wall_s"] > 0 and row["stages"][0] == "train:fedavg"
    assert (
        rows["private"]["epsilon"]
        == json.loads((sims["private"].out / "summary.json").read_text())["privacy"]["epsilon"]
    )
    assert "dp_release:central" in rows["private"]["stages"] and rows["private"]["delta"] == 1e-5
    attacked = rows["attacked"]
    assert (attacked["attack"], attacked["malicious_fraction"], attacked["aggregator"]) == ("backdoor", 0.2, "median")
    assert attacked["backdoor_success"] is not None and 0 <= attacked["backdoor_success"] <= 1
    assert rows["compressed"]["uplink"] == "qsgd" and "uplink:qsgd" in rows["compressed"]["stages"]
    assert rows["compressed"]["epsilon"] is None and rows["compressed"]["attack"] is None
    assert main(["runs", "--db", str(db), "--csv"]) == 0
    frame = pd.read_csv(__import__("io").StringIO(capsys.readouterr().out))
    assert len(frame) == 3 and set(frame["name"]) == set(rows)
    csv_private = frame.set_index("name").loc["private"]
    assert math.isclose(csv_private["epsilon"], rows["private"]["epsilon"], rel_tol=1e-12)
    assert csv_private["stages"] == " ".join(rows["private"]["stages"])


def test_runs_json_on_an_empty_store_is_an_empty_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.db"
    with RunStore(db):
        pass
    assert main(["runs", "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
