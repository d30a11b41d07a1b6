"""The Streamlit app rendered with AppTest against real stores: what a user sees on each page."""

from __future__ import annotations

import copy
import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest
from transformers import BertModel

from dashboard.figures import human_bytes
from edge.onnx_bottom import EdgeEncoder
from fedsim.runstore import RunStore
from fedsim.split.model import minilm_path
from fedsim.split.regions import run_regions
from fedsim.split.simulate import run_split
from fedsim.split.trainer import CloudTrainer
from tests.conftest import RunFactory, tiny_config
from tests.dashboard.apptest import render
from tests.split_fixtures import split_config


def test_empty_and_missing_stores_show_a_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = render(tmp_path / "none.db", monkeypatch)
    assert "No run store at" in app.info[0].value

    RunStore(tmp_path / "empty.db").close()
    app = render(tmp_path / "empty.db", monkeypatch)
    assert "has no runs yet" in app.info[0].value


def test_runs_page_lists_a_finished_simulation(run_engine: RunFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = run_engine(tiny_config(name="dash-sim", rounds=3))
    app = render(engine.out_dir / "fedsim.db", monkeypatch)
    table = app.dataframe[0].value
    assert list(table["name"]) == ["dash-sim"]
    assert list(table["rounds"]) == ["3/3"]
    assert list(table["status"]) == ["finished"]
    assert table["final accuracy"][0] == pytest.approx(engine.last_eval.accuracy, abs=1e-4)  # type: ignore[union-attr]
    assert table["task"][0] == "classification"
    assert table["result"][0] == f"accuracy {engine.last_eval.accuracy:.4g}"  # type: ignore[union-attr]
    assert app.caption[-1].value == "1 of 1 runs"


def test_simulation_page_shows_rounds_accuracy_and_the_timeline(
    run_engine: RunFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tiny_config(name="dash-pool", rounds=3, devices=2)
    engine = run_engine(tree)
    app = render(engine.out_dir / "fedsim.db", monkeypatch)
    app.sidebar.selectbox[0].set_value(engine.run_id).run()
    assert not app.exception
    assert app.title[0].value == engine.run_id
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["rounds"] == "3/3"
    assert metrics["test accuracy"] == f"{engine.last_eval.accuracy:.4f}"  # type: ignore[union-attr]
    assert metrics["status"] == "finished"
    timeline = [c.value for c in app.caption if c.value.startswith("timeline")]
    assert timeline == ["timeline of round 3: 5 clients on 2 devices"]  # counted from 1, as the log counts
    assert len(app.get("plotly_chart")) >= 3
    assert "No client state: this algorithm keeps none between rounds." in [c.value for c in app.caption]
    app.toggle[0].set_value(False).run()
    app.number_input[0].set_value(1).run()
    assert not app.exception
    assert [c.value for c in app.caption if c.value.startswith("timeline")] == [
        "timeline of round 1: 5 clients on 2 devices"
    ]


def test_simulation_page_shows_the_client_state_store(run_engine: RunFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tiny_config(name="dash-state", rounds=2, algorithm={"kind": "scaffold", "lr": 0.05, "batch_size": 8})
    engine = run_engine(tree)
    app = render(engine.out_dir / "fedsim.db", monkeypatch)
    app.sidebar.selectbox[0].set_value(engine.run_id).run()
    assert not app.exception
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["clients with state"] == str(len(engine.store))
    assert len(engine.store) > 0
    assert metrics["state in memory"] == human_bytes(engine.store.memory_bytes())
    assert metrics["state in memory"].endswith((" kB", " MB", " GB"))


def test_a_running_run_without_rounds_and_then_with_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedsim.runstore import RoundRow

    db = tmp_path / "live.db"
    with RunStore(db) as store:
        run_id = store.start_run("live", "simulation", {"rounds": 10}, 10)
    app = render(db, monkeypatch)
    app.sidebar.selectbox[0].set_value(run_id).run()
    assert not app.exception
    assert "No rounds yet" in app.info[0].value
    with RunStore(db) as store:
        store.log_round(run_id, RoundRow(run_id, 0, 2.3, 0.25, 2.1, 100, 100, 0.1, 0.1, 64, 2), [])
    app.run()
    assert not app.exception
    assert {m.label: m.value for m in app.metric}["rounds"] == "1/10"


def test_split_page_shows_steps_accuracy_compression_and_edge_clients(
    onnx_bottom: Path, sst2_dir: Path, encoder: BertModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = split_config(
        name="dash-split",
        codec="lowrank-int8:8",
        data={"dir": str(sst2_dir), "clients": 2},
        train={"steps": 6, "batch_size": 10, "eval_every": 3},
    )
    edge = EdgeEncoder(onnx_bottom, minilm_path(), max_length=16)
    db = tmp_path / "runs.db"
    summary = run_split(cfg, tmp_path / "run", db, edge, CloudTrainer(cfg, encoder))
    app = render(db, monkeypatch)
    assert list(app.dataframe[0].value["kind"]) == ["split"]
    app.sidebar.selectbox[0].set_value(summary["run_id"]).run()
    assert not app.exception
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["steps"] == "6/6"
    assert metrics["test accuracy"] == f"{summary['test_accuracy']:.4f}"
    assert metrics["compression"] == f"{summary['compression_ratio']:.1f}x"
    codecs = app.dataframe[0].value
    assert list(codecs["codec"]) == ["lowrank-int8:8"] and list(codecs["steps"]) == [6]
    assert "2 edge clients" in [c.value for c in app.caption]
    edge_rows = app.dataframe[1].value
    assert list(edge_rows["batches"]) == [3, 3] and all(edge_rows["sentences/s"] > 0)


def test_split_page_shows_regions_and_adapter_syncs(
    onnx_bottom: Path, sst2_dir: Path, pretrained: BertModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = split_config(
        regions=3,
        data={"dir": str(sst2_dir), "clients": 3},
        train={"steps": 4, "batch_size": 6},
        control={"kind": "none", "knob": {"name": "tau", "ladder": [2]}},
    )
    edge = EdgeEncoder(onnx_bottom, minilm_path(), max_length=16)
    trainers = [CloudTrainer(cfg, copy.deepcopy(pretrained)) for _ in range(3)]
    db = tmp_path / "runs.db"
    summary = run_regions(cfg, tmp_path / "run", db, edge, trainers)
    app = render(db, monkeypatch)
    app.sidebar.selectbox[0].set_value(summary["run_id"]).run()
    assert not app.exception
    metrics = {m.label: m.value for m in app.metric}
    assert metrics["regions"] == "3"
    assert metrics["adapter syncs"] == "2"  # steps 2 and 4
    assert metrics["test accuracy"] == f"{summary['test_accuracy']:.4f}"
    assert "3 edge clients" in [c.value for c in app.caption]
    with RunStore.open_readonly(db) as store:  # regions take turns: their busy intervals in a step do not overlap
        turns = store.client_runs(summary["run_id"], round=2)
    assert [t.device for t in turns] == [0, 1, 2]
    assert all(a.end <= b.start for a, b in pairwise(turns))


def test_simulation_page_shows_the_executor_accelerator_and_data_stalls(
    run_engine: RunFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = run_engine(tiny_config(name="dash-stall", rounds=2, devices=2))
    app = render(engine.out_dir / "fedsim.db", monkeypatch)
    app.sidebar.selectbox[0].set_value(engine.run_id).run()
    assert not app.exception
    assert "executor sequential on accelerator cpu" in [c.value for c in app.caption]
    plan = next(df.value for df in app.dataframe if "data stall" in df.value.columns)
    assert list(plan["device"]) == [0, 1]
    shares = [float(s.rstrip("%")) for s in plan["data stall"]]
    assert all(0.0 <= s < 100.0 for s in shares)


def test_simulation_page_shows_the_federated_evaluation_spread(
    run_engine: RunFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tiny_config(
        name="dash-fed",
        rounds=2,
        algorithm={"kind": "ditto", "lr": 0.1, "batch_size": 16},
        federated_eval={"kind": "holdout", "holdout": 0.3},
    )
    engine = run_engine(tree)
    app = render(engine.out_dir / "fedsim.db", monkeypatch)
    app.sidebar.selectbox[0].set_value(engine.run_id).run()
    assert not app.exception
    assert "Federated evaluation" in [h.value for h in app.subheader]
    figure = next(c for c in app.get("plotly_chart") if "held-out" in c.proto.spec)
    names = [trace["name"] for trace in json.loads(figure.proto.spec)["data"]]
    assert names == ["global model p10-p90", "global model mean", "personal models p10-p90", "personal models mean"]


def test_split_page_shows_edge_devices_coming_and_going(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedsim.runstore import MemberRow, RoundRow

    db = tmp_path / "runs.db"
    with RunStore(db) as store:  # what fedsim serve writes when edge-1 dies and backup edge-2 takes over
        run_id = store.start_run("served", "split", {}, 6)
        for step in range(1, 7):
            store.log_round(run_id, RoundRow(run_id, step, 0.5, None, None, 100, 0, step, 0.1, 4, 1), [])
        events = [(0, "join", "edge-0", -1), (0, "join", "edge-1", 0), (2, "standby", "edge-2", -1)]
        events += [(3, "lost", "edge-1", 0), (3, "join", "edge-2", 0), (3, "takeover", "edge-2", 0)]
        events += [(6, "leave", "edge-0", -1)]
        store.log_members(
            [MemberRow(run_id, k, r, 1000.0 + k, kind, dev, part) for k, (r, kind, dev, part) in enumerate(events)]
        )
    app = render(db, monkeypatch)
    app.sidebar.selectbox[0].set_value(run_id).run()
    assert not app.exception
    assert "Edge devices over time" in [h.value for h in app.subheader]
    metrics = {m.label: m.value for m in app.metric}
    assert (metrics["members now"], metrics["joins"], metrics["lost"], metrics["takeovers"]) == ("1", "3", "1", "1")
    table = next(d.value for d in app.dataframe if "event" in d.value.columns)
    assert list(table["event"]) == [e[1] for e in events]
    assert list(table["partition"]) == ["-", "0", "-", "0", "0", "0", "-"]


def test_a_hostile_run_name_is_shown_as_text_not_markdown_or_a_link(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedsim.runstore import RoundRow

    name = "![x](http://evil.example/t.png)<a href='http://evil.example'>click</a>"
    db = tmp_path / "runs.db"
    with RunStore(db) as store:  # the store does not judge names; an older fedsim wrote any
        run_id = store.start_run(name, "simulation", {}, 2)
        store.log_round(run_id, RoundRow(run_id, 0, 2.3, 0.25, 2.1, 100, 100, 0.1, 0.1, 64, 2), [])
        store.finish_run(run_id, "finished", None)
    app = render(db, monkeypatch)
    app.sidebar.selectbox[0].set_value(run_id).run()
    assert not app.exception
    title = app.title[0].value
    assert "\\!\\[x\\]\\(http\u2060\\:" in title and "\\<a href" in title  # escaped, and no autolink
    spec = json.loads(app.get("plotly_chart")[0].proto.spec)
    names = [trace.get("name", "") for trace in spec["data"]]
    assert any("&lt;a href='http://evil.example'&gt;click&lt;/a&gt;" in n for n in names), names
    assert not any("<a " in n for n in names)


def test_a_run_whose_process_died_shows_as_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    db = tmp_path / "runs.db"
    with RunStore(db) as store:
        alive = store.start_run("alive", "simulation", {}, 10)
        dead = store.start_run("dead", "simulation", {}, 10)
    with sqlite3.connect(db) as raw:  # a heartbeat ten minutes old: the process went without a word
        raw.execute("UPDATE runs SET heartbeat = heartbeat - 600 WHERE run_id = ?", (dead,))
        raw.execute("UPDATE runs SET heartbeat = strftime('%s', 'now') WHERE run_id = ?", (alive,))
    app = render(db, monkeypatch)
    table = app.dataframe[0].value
    assert dict(zip(table["name"], table["status"], strict=True)) == {"alive": "running", "dead": "failed"}


def twin_runs(db: Path, kind: str = "simulation", rounds: int = 30) -> list[str]:
    """Two finished runs both named "twin" (as two runs of one config are), with gigabytes on the wire."""
    from fedsim.runstore import RoundRow

    ids = []
    with RunStore(db) as store:
        for k in range(2):
            run_id = store.start_run("twin", kind, {}, rounds)
            for r in range(rounds):
                accuracy = 0.80 + 0.01 * k + 0.0005 * r if r % 5 == 0 else None  # a 1.5-point climb
                metrics = json.dumps({"bytes_uncompressed": 300_000_000, "codec": "int8"})
                row = RoundRow(run_id, r, 0.5 - 0.01 * r, accuracy, None, 100_000_000, 0, 0.1, 0.1, 32, 4, metrics)
                store.log_round(run_id, row, [])
            store.finish_run(run_id, "finished", None)
            ids.append(run_id)
    return ids


def figure(app: AppTest, title_part: str) -> dict[str, Any]:
    spec = next(c.proto.spec for c in app.get("plotly_chart") if title_part in c.proto.spec)
    return dict(json.loads(spec))


@pytest.mark.parametrize("kind", ["simulation", "split"])
def test_every_figure_reads_at_a_glance(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = twin_runs(tmp_path / "runs.db", kind)
    app = render(tmp_path / "runs.db", monkeypatch)
    shown = [app.sidebar.selectbox[0].format_func(i) for i in (first, second)]
    assert shown[0] != shown[1] and all(s.startswith("twin · ") for s in shown)  # apart, and not cut
    app.sidebar.selectbox[0].set_value(first).run()
    app.sidebar.multiselect[0].set_value([second]).run()
    assert not app.exception
    accuracy = figure(app, "test accuracy")
    names = [t["name"] for t in accuracy["data"] if t["name"].endswith(" accuracy")]
    assert len(names) == 2 and len(set(names)) == 2 and all(n.startswith("twin · ") for n in names)
    low, high = accuracy["layout"]["yaxis"]["range"]
    assert high >= 1.0 and high - low >= 0.05  # not a 1.5-point window
    assert all(t["mode"] == "lines+markers" for t in accuracy["data"] if t["name"].endswith(" accuracy"))
    wire = figure(app, "cumulative GB")  # 3 GB sent, 9 GB uncompressed: decimal units, not Plotly's "3B"
    per = "round" if kind == "simulation" else "step"
    assert wire["layout"]["yaxis"]["title"]["text"] == f"MB per {per}"
    assert next(t["y"][0] for t in wire["data"] if t["type"] == "bar") == pytest.approx(100.0)
    for chart in app.get("plotly_chart"):
        layout = json.loads(chart.proto.spec)["layout"]
        if layout.get("xaxis", {}).get("title", {}).get("text") in ("round", "step"):
            axis = layout["xaxis"]
            assert axis["tickmode"] == "linear" and float(axis["dtick"]).is_integer() and axis["tickformat"] == "d"
            xs = [x for t in json.loads(chart.proto.spec)["data"] for x in t.get("x", [])]
            assert axis["range"][0] < min(xs) <= max(xs) < axis["range"][1]  # first and last points drawn whole
            assert (min(xs), max(xs)) == ((1, 30) if kind == "simulation" else (0, 29))  # rounds from 1, as logged
        for name in ("yaxis", "yaxis2"):
            axis = layout.get(name, {})
            title = axis.get("title", {}).get("text", "")
            if title.endswith(("kB", "MB", "GB")) or " per " in title or "loss" in title:
                assert axis.get("rangemode") == "tozero", (name, title)
