"""What DP covers is the model: under DP the run store keeps none of the clients' un-noised statistics of a
round (their training loss and sample counts, federated evaluation's spread) unless ``privacy.diagnostics``,
which labels them; ``fedsim runs`` shows the run's, the deployment's and the audit's epsilon in their own
columns; ``privacy.noise_seed: system`` keys the noise by a secret instead of the seed. The store is read here
with sqlite3, not fedsim's reader."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.cli import main
from fedsim.config import ConfigError, parse_config
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from tests.conftest import QUICKSTART, tiny_config

PRIVACY = {"kind": "central", "clip": 0.5, "noise_multiplier": 1.0, "delta": 1e-5}
HOLDOUT = {"kind": "holdout", "holdout": 0.2}


def _run(tmp_path: Path, name: str, privacy: dict[str, Any] | None, **more: Any) -> Engine:
    tree = tiny_config(rounds=2, federated_eval=HOLDOUT, **more)
    if privacy is not None:
        tree["privacy"] = privacy
    out = tmp_path / name
    engine = Engine(parse_config(tree), out_dir=out, db_path=out / "runs.db")
    engine.run()
    return engine


def _stored(tmp_path: Path, name: str) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    with sqlite3.connect(tmp_path / name / "runs.db") as db:
        rounds = db.execute("SELECT train_loss, samples, metrics_json FROM rounds ORDER BY round").fetchall()
        clients = db.execute("SELECT client, samples, loss FROM client_runs").fetchall()
    return rounds, clients


def test_a_dp_runs_store_has_no_unnoised_client_statistics(tmp_path: Path) -> None:
    _run(tmp_path, "dp", PRIVACY)
    rounds, clients = _stored(tmp_path, "dp")
    assert len(rounds) == 2 and len(clients) == 2 * 5  # who trained when is kept
    assert all(loss is None and samples is None for loss, samples, _ in rounds)
    assert all(samples is None and loss is None for _, samples, loss in clients)
    metrics = [json.loads(m) for _, _, m in rounds]
    assert all("fed_eval" not in m and "dp_diagnostics" not in m and m["epsilon"] > 0 for m in metrics)
    summary = json.loads((tmp_path / "dp" / "summary.json").read_text())["privacy"]
    assert summary["client_statistics"] == "withheld"


def test_diagnostics_keep_them_labelled_and_a_plain_run_keeps_them(tmp_path: Path) -> None:
    _run(tmp_path, "diag", {**PRIVACY, "diagnostics": True})
    _run(tmp_path, "plain", None)
    for name in ("diag", "plain"):
        rounds, clients = _stored(tmp_path, name)
        assert all(loss > 0 and samples > 0 for loss, samples, _ in rounds)
        assert all(samples > 0 and loss > 0 for _, samples, loss in clients)
        metrics = [json.loads(m) for _, _, m in rounds]
        assert all("fed_eval" in m for m in metrics)
        assert all(m.get("dp_diagnostics") is (True if name == "diag" else None) for m in metrics)
    summary = json.loads((tmp_path / "diag" / "summary.json").read_text())["privacy"]
    assert summary["client_statistics"] == "diagnostics"


def test_a_schema_3_store_takes_withheld_rows_and_keeps_its_old_ones(tmp_path: Path) -> None:
    db_path = tmp_path / "old.db"
    with sqlite3.connect(db_path) as db:  # schema 3's two tables as it wrote them: samples NOT NULL
        db.execute(
            "CREATE TABLE rounds (run_id TEXT NOT NULL, round INTEGER NOT NULL, train_loss REAL, test_accuracy"
            " REAL, test_loss REAL, bytes_up INTEGER NOT NULL, bytes_down INTEGER NOT NULL, wall_s REAL NOT NULL,"
            " train_s REAL NOT NULL, samples INTEGER NOT NULL, clients INTEGER NOT NULL, metrics_json TEXT NOT NULL"
            " DEFAULT '{}', PRIMARY KEY (run_id, round))"
        )
        db.execute(
            "CREATE TABLE client_runs (run_id TEXT NOT NULL, round INTEGER NOT NULL, client INTEGER NOT NULL, device"
            ' INTEGER NOT NULL, start REAL NOT NULL, "end" REAL NOT NULL, samples INTEGER NOT NULL, loss REAL)'
        )
        db.execute("INSERT INTO rounds VALUES ('old', 0, 0.5, 0.9, 0.4, 10, 20, 1.0, 0.5, 123, 3, '{}')")
        db.execute("PRAGMA user_version=3")
    _ = RunStore(db_path)  # the writer migrates
    with sqlite3.connect(db_path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == 4
        assert db.execute("SELECT samples, train_loss FROM rounds WHERE run_id='old'").fetchall() == [(123, 0.5)]
        db.execute("INSERT INTO rounds VALUES ('new', 0, NULL, NULL, NULL, 1, 1, 1.0, 1.0, NULL, 3, '{}')")
        db.execute("INSERT INTO client_runs VALUES ('new', 0, 1, 0, 0.0, 1.0, NULL, NULL)")
        notnull = {r[1]: r[3] for r in db.execute("PRAGMA table_info(client_runs)")}
        assert notnull["samples"] == 0 and notnull["start"] == 1


def test_fedsim_runs_shows_the_deployments_and_the_audits_epsilon(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db, out = tmp_path / "runs.db", tmp_path / "o"
    sets = ["privacy.kind=central", "privacy.clip=1", "privacy.noise_multiplier=1", "privacy.population=10000"]
    sets += ["privacy.noise_cohort=1000", "privacy.audit.canaries=5", "rounds=2", "progress=false"]
    main(["run", str(QUICKSTART), *(a for s in sets for a in ("--set", s)), "--out", str(out), "--db", str(db)])
    capsys.readouterr()
    main(["runs", "--db", str(db), "--json"])
    (row,) = json.loads(capsys.readouterr().out)
    summary = json.loads((out / "summary.json").read_text())["privacy"]
    assert row["epsilon"] == pytest.approx(summary["epsilon"])
    assert row["deployment_epsilon"] == pytest.approx(summary["deployment"]["epsilon"])
    assert row["audit_epsilon"] == pytest.approx(summary["audit"]["epsilon_estimate"])
    assert 0 < row["deployment_epsilon"] < row["epsilon"]  # the deployment's noise is 20x the run's own sum's
    main(["runs", "--db", str(db)])
    header, line = capsys.readouterr().out.splitlines()
    assert "deployed" in header and "audit" in header and f"{row['deployment_epsilon']:.3g}" in line


def test_a_system_noise_seed_is_a_secret_not_the_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    weights = {}
    for name, seed in (("run1", "run"), ("run2", "run"), ("sys1", "system"), ("sys2", "system")):
        weights[name] = _run(tmp_path, name, {**PRIVACY, "noise_seed": seed}, progress=True).global_state
    err = capsys.readouterr().err
    assert err.count("privacy.noise_seed=system") == 2 and "cannot be replayed" in err
    assert torch.equal(weights["run1"], weights["run2"])  # keyed by the seed: replayable
    assert not torch.allclose(weights["sys1"], weights["sys2"], atol=1e-4)  # keyed by a secret each time
    summary = json.loads((tmp_path / "sys1" / "summary.json").read_text())["privacy"]
    assert summary["noise_seed"] == "system"


@pytest.mark.parametrize(
    ("population", "delta", "refused"),
    [(100, 0.05, True), (100, 0.01, False), (1_000_000, 1e-6, False), (1_000_000, 2e-6, True), (100, 1e-5, False)],
)
def test_delta_above_one_clients_share_of_the_population_is_refused(
    population: int, delta: float, refused: bool
) -> None:
    """(0, delta)-DP holds for a mechanism that publishes one client's data whole with probability delta, so a
    delta above 1/population (one client's share) promises nothing; pfl-research's 1e-6 of a million is the
    boundary, accepted. The population is privacy.population's where set, else data.clients'."""
    privacy = {"kind": "central", "clip": 1.0, "noise_multiplier": 1.0, "delta": delta}
    if population > 100:
        privacy["population"] = population
    tree = tiny_config(data__clients=100, clients_per_round=10, privacy=privacy)
    if refused:
        with pytest.raises(ConfigError, match=rf"privacy\.delta={delta:g} is above 1/population"):
            parse_config(tree)
    else:
        assert parse_config(tree).privacy.delta == delta


SECAGG = {"kind": "secagg_plus", "num_shares": 3, "reconstruction_threshold": 2}


def test_secaggs_error_and_federated_evaluation_are_withheld_where_dp_runs(tmp_path: Path) -> None:
    """SecAgg+'s quantization error is measured against the un-noised sum (its norm follows from it) and
    federated evaluation scores each client's own data: a DP run stores neither, in the run store or in
    summary.json; its diagnostics twin keeps both, labelled, read back with sqlite3 and json."""
    for name, diagnostics in (("dp", False), ("diag", True)):
        _run(tmp_path, name, {**PRIVACY, "diagnostics": diagnostics}, clients_per_round=10, secagg=SECAGG)
    found: dict[str, tuple[list[Any], dict[str, Any]]] = {}
    for name in ("dp", "diag"):
        rounds, _ = _stored(tmp_path, name)
        errors = [json.loads(m).get("secagg_quantization_error") for _, _, m in rounds]
        found[name] = errors, json.loads((tmp_path / name / "summary.json").read_text())
    errors, summary = found["dp"]
    assert errors == [None, None]
    assert summary["secagg"]["quantization_error"] is None and summary["federated_eval"] == {}
    errors, summary = found["diag"]
    assert all(e is not None and 0 < e < 1 for e in errors)
    assert summary["secagg"]["quantization_error"] == pytest.approx(sum(errors) / 2)
    assert 0 <= summary["federated_eval"]["mean"] <= 1


def test_the_scheduler_plans_a_dp_run_by_client_count_not_by_withheld_sample_counts(tmp_path: Path) -> None:
    """The runtime model learns seconds per sample from each client's sample count and keeps its observations
    in every checkpoint; the plan's predicted seconds (device_rounds) start as the cohort's sample total. Under
    DP both use a count of one a client, so neither the store nor a checkpoint holds a sample count; the
    diagnostics twin keeps the counts."""
    for name, diagnostics in (("dp", False), ("diag", True)):
        more = {"clients_per_round": 10, "devices": 2, "checkpoint": {"every": 1}}
        _run(tmp_path, name, {**PRIVACY, "diagnostics": diagnostics}, **more)
    for name, by_count in (("dp", True), ("diag", False)):
        with sqlite3.connect(tmp_path / name / "runs.db") as db:
            first = db.execute("SELECT clients, predicted_s FROM device_rounds WHERE round = 0").fetchall()
        meta = json.loads((tmp_path / name / "checkpoints" / "ckpt-000000" / "meta.json").read_text())
        sizes = {size for device in meta["runtime"]["obs"] for size, _ in device}
        if by_count:  # nothing learnt yet: one second a client, the count planned on the device
            assert all(predicted == planned for planned, predicted in first) and sizes == {1}
        else:
            assert sum(predicted for _, predicted in first) > 10 and max(sizes) > 1
