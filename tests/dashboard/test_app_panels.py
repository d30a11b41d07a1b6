"""The dashboard's panels for privacy, attacks, decentralised runs, sweeps and leaders, rendered with AppTest
against real stores."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dashboard.escape import markdown_literal
from dashboard.figures import human_bytes
from fedsim.runstore import RunStore
from tests.conftest import RunFactory, tiny_config
from tests.dashboard.apptest import render


def test_simulation_page_shows_the_privacy_budget_and_secaggs_bytes(
    run_engine: RunFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # with diagnostics: SecAgg+'s quantization error is measured against the un-noised sum, withheld without them
    privacy = {"kind": "central", "clip": 0.5, "noise_multiplier": 1.0, "delta": 1e-5, "diagnostics": True}
    secagg = {"kind": "secagg_plus", "num_shares": 3, "reconstruction_threshold": 2}
    engine = run_engine(tiny_config(name="dash-private", rounds=3, privacy=privacy, secagg=secagg))
    summary = json.loads((engine.out_dir / "summary.json").read_text())
    app = render(engine.out_dir / "fedsim.db", monkeypatch)
    app.sidebar.selectbox[0].set_value(engine.run_id).run()
    assert not app.exception
    headers = [h.value for h in app.subheader]
    assert "Differential privacy" in headers and "Secure aggregation (SecAgg+)" in headers
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["epsilon spent"] == f"{summary['privacy']['epsilon']:.3f}"
    assert metrics["delta"] == "1e-05" and metrics["clip"] == "0.5"
    with RunStore.open_readonly(engine.out_dir / "fedsim.db") as store:
        last = json.loads(store.rounds(engine.run_id)[-1].metrics_json)
    assert metrics["SecAgg+ bytes up per client"] == human_bytes(last["secagg_up_bytes"])
    assert metrics["quantization error"] == f"{last['secagg_quantization_error']:.2e}"
    assert metrics["failed rounds"] == "0"
    charts = [json.loads(c.proto.spec) for c in app.get("plotly_chart")]
    private = {**privacy, "diagnostics": False}
    withheld = run_engine(tiny_config(name="dash-withheld", rounds=2, privacy=private, secagg=secagg))
    other = render(withheld.out_dir / "fedsim.db", monkeypatch)
    other.sidebar.selectbox[0].set_value(withheld.run_id).run()
    assert {m.label: m.value for m in other.metric}["quantization error"] == "withheld"
    budget = next(c for c in charts if any(t.get("name") == "epsilon spent" for t in c["data"]))
    curve = next(t for t in budget["data"] if t.get("name") == "epsilon spent")
    assert (
        curve["x"] == [1, 2, 3]
        and curve["y"] == sorted(curve["y"])
        and curve["y"][-1] == pytest.approx(summary["privacy"]["epsilon"])
    )


def test_the_privacy_panel_shows_the_canaries_estimate_beside_the_accountants_epsilon(
    run_engine: RunFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    privacy = {"kind": "central", "clip": 0.5, "noise_multiplier": 1.0, "delta": 1e-5, "audit": {"canaries": 3}}
    privacy |= {"population": 1000}  # a simulated deployment: its epsilon beside the run's
    engine = run_engine(tiny_config(name="dash-audit", rounds=3, privacy=privacy))
    summary = json.loads((engine.out_dir / "summary.json").read_text())["privacy"]
    app = render(engine.out_dir / "fedsim.db", monkeypatch)
    app.sidebar.selectbox[0].set_value(engine.run_id).run()
    assert not app.exception
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["epsilon spent"] == f"{summary['epsilon']:.3f}"
    assert metrics["deployment's epsilon"] == f"{summary['deployment']['epsilon']:.3f}"
    assert metrics["empirical epsilon (canaries)"] == f"{summary['audit']['epsilon_estimate']:.3f}"


def test_a_plain_run_has_no_privacy_panels(run_engine: RunFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = run_engine(tiny_config(name="dash-plain", rounds=2))
    app = render(engine.out_dir / "fedsim.db", monkeypatch)
    app.sidebar.selectbox[0].set_value(engine.run_id).run()
    assert not app.exception
    headers = [h.value for h in app.subheader]
    assert "Differential privacy" not in headers and "Secure aggregation (SecAgg+)" not in headers


def test_simulation_page_shows_the_attackers_and_the_backdoors_success(
    run_engine: RunFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    attack = {"kind": "backdoor", "fraction": 0.3, "target": 1}
    tree = tiny_config(name="dash-attack", rounds=3, clients_per_round=None, model={"kind": "cnn"}, attack=attack)
    engine = run_engine(tree)  # every client every round: the 3 attackers in each
    summary = json.loads((engine.out_dir / "summary.json").read_text())
    with RunStore.open_readonly(engine.out_dir / "fedsim.db") as store:
        rows = [json.loads(r.metrics_json) for r in store.rounds(engine.run_id)]
    app = render(engine.out_dir / "fedsim.db", monkeypatch)
    app.sidebar.selectbox[0].set_value(engine.run_id).run()
    assert not app.exception
    assert "Attacks" in [h.value for h in app.subheader]
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["attackers this round"] == str(len(rows[-1]["attackers"]))
    assert metrics["attacker turns"] == str(sum(len(m["attackers"]) for m in rows))
    assert metrics["backdoor success"] == f"{summary['attack']['backdoor_success']:.1%}"
    assert len(rows[-1]["attackers"]) == 3
    latest = ", ".join(str(c) for c in rows[-1]["attackers"])
    captions = [c.value for c in app.caption]
    assert markdown_literal(f"attacking clients in round 3: {latest}") in captions
    assert markdown_literal("attack: backdoor, 30% of clients; aggregator: mean") in captions
    charts = [json.loads(c.proto.spec) for c in app.get("plotly_chart")]
    curve = next(t for c in charts for t in c["data"] if t.get("name") == "backdoor success")
    assert curve["x"] == [1, 2, 3] and curve["y"][-1] == pytest.approx(summary["attack"]["backdoor_success"])


def test_the_attack_panel_names_your_own_attack_and_rule(
    run_engine: RunFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # the examples' files, named from the repository root
    attack = {"factory": "examples/own_attack.py:Mimic", "fraction": 0.3}
    aggregator = {"factory": "examples/own_rule.py:MeaMed", "byzantine": 1}
    tree = tiny_config(name="dash-own", rounds=2, clients_per_round=None, attack=attack, aggregator=aggregator)
    engine = run_engine(tree)
    app = render(engine.out_dir / "fedsim.db", monkeypatch)
    app.sidebar.selectbox[0].set_value(engine.run_id).run()
    assert not app.exception
    expected = (
        "attack: mimic (examples/own_attack.py:Mimic), 30% of clients; aggregator: meamed (examples/own_rule.py:MeaMed)"
    )
    assert markdown_literal(expected) in [c.value for c in app.caption]


def test_a_decentralised_run_shows_its_graph_and_consensus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedsim.api.launch import execute
    from fedsim.config import parse_config
    from tests.gossip.test_gossip_rules import gossip_config

    db = tmp_path / "fedsim.db"
    summary = execute(parse_config(gossip_config("decentlam", "ring")), tmp_path / "out", db)
    with RunStore.open_readonly(db) as store:
        rows = [json.loads(r.metrics_json) for r in store.rounds(summary.run_id)]
    app = render(db, monkeypatch)
    app.sidebar.selectbox[0].set_value(summary.run_id).run()
    assert not app.exception
    assert "Decentralised training" in [h.value for h in app.subheader]
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["topology"] == "ring" and metrics["nodes"] == "6"
    assert metrics["consensus distance"] == f"{rows[-1]['consensus_distance']:.3g}"
    charts = [json.loads(c.proto.spec) for c in app.get("plotly_chart")]
    curve = next(t for c in charts for t in c["data"] if t.get("name") == "consensus distance")
    assert curve["x"] == [1, 2, 3, 4] and curve["y"] == pytest.approx([m["consensus_distance"] for m in rows])
    edges = next(t for c in charts for t in c["data"] if t.get("name") == "edges")
    assert len(edges["x"]) == 3 * 12  # a ring of 6: each node heard by 2, a segment and a gap each
    nodes = next(t for c in charts for t in c["data"] if t.get("name") == "nodes")
    assert len(nodes["marker"]["color"]) == 6  # coloured by each node's last batch loss


def test_a_sweeps_run_shows_the_whole_grid_side_by_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedsim.cli import main
    from tests.sweep.test_sweep_runs import write_sweep

    db = tmp_path / "fedsim.db"
    assert main(["sweep", str(write_sweep(tmp_path)), "--out", str(tmp_path / "out"), "--db", str(db)]) == 0
    report = json.loads((tmp_path / "out" / "sweep.json").read_text())
    app = render(db, monkeypatch)
    app.sidebar.selectbox[0].set_value(report["runs"][1]["run_id"]).run()
    assert not app.exception
    assert "Sweep mini" in [h.value for h in app.subheader]
    assert "4 runs of the grid, 4 finished" in [c.value for c in app.caption]
    charts = [json.loads(c.proto.spec) for c in app.get("plotly_chart")]
    bars = next(t for c in charts for t in c["data"] if t.get("type") == "bar")
    assert bars["y"] == pytest.approx([r["final_accuracy"] for r in report["runs"]])
    assert bars["x"][3] == "g03-modelmlp_seed1"
    curves = next(c for c in charts if len(c["data"]) == 4 and all(t.get("mode") == "lines" for t in c["data"]))
    assert [t["name"] for t in curves["data"]] == bars["x"]


def test_a_federated_lgd_run_shows_its_leaders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedsim.api.launch import execute
    from fedsim.config import parse_config
    from tests.algorithms.test_fedlgd import fedlgd_config

    db = tmp_path / "fedsim.db"
    summary = execute(parse_config(fedlgd_config()), tmp_path / "out", db)  # elections after rounds 2 and 4
    with RunStore.open_readonly(db) as store:
        elected = [json.loads(r.metrics_json).get("leader") for r in store.rounds(summary.run_id)]
    app = render(db, monkeypatch)
    app.sidebar.selectbox[0].set_value(summary.run_id).run()
    assert not app.exception
    assert "Leaders" in [h.value for h in app.subheader]
    metrics = {m.label: m.value for m in app.metric}
    leaders = [e for e in elected if e is not None]
    assert metrics["elections"] == "2" and metrics["global leader"] == str(leaders[-1])
    charts = [json.loads(c.proto.spec) for c in app.get("plotly_chart")]
    curve = next(t for c in charts for t in c["data"] if t.get("name") == "global leader")
    assert curve["x"] == [2, 4] and curve["y"] == leaders
