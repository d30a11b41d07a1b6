"""The dashboard's reads: clear messages for every bad store, and live refreshes that fetch only new rows."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from dashboard.data import LiveRun, StoreProblem, list_runs, schema_note
from fedsim.runstore import ClientRow, RoundRow, RunStore
from tests.conftest import RunFactory, tiny_config


def test_missing_path_foreign_file_and_empty_store_each_say_so(tmp_path: Path) -> None:
    with pytest.raises(StoreProblem, match=r"No run store at .*nowhere\.db"):
        list_runs(tmp_path / "nowhere.db")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreProblem, match="cannot be read as a fedsim run store"):
        list_runs(junk)
    RunStore(tmp_path / "empty.db").close()
    with pytest.raises(StoreProblem, match="has no runs yet"):
        list_runs(tmp_path / "empty.db")


def test_live_run_fetches_only_new_rounds(run_engine: RunFactory) -> None:
    engine = run_engine(tiny_config(rounds=4))
    db = engine.out_dir / "fedsim.db"
    (info,) = list_runs(db)
    live = LiveRun(db, info.run_id)
    assert live.refresh() == 4
    assert [r.round for r in live.rounds] == [0, 1, 2, 3]
    assert len(live.clients) == 4 * 5 and len(live.devices) == 4
    assert live.refresh() == 0 and len(live.clients) == 20  # nothing twice
    with RunStore(db) as store:  # the run goes on: one more round arrives
        row = RoundRow(info.run_id, 4, 0.5, None, None, 10, 10, 0.1, 0.1, 32, 1)
        store.log_round(info.run_id, row, [ClientRow(info.run_id, 4, 7, 0, 0.0, 1.0, 32, 0.5)])
    assert live.refresh() == 1
    assert live.last_round == 4 and len(live.clients) == 21
    assert live.info is not None and live.info.status == "finished"


def test_a_run_without_rounds_and_an_older_store(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    with RunStore(db) as store:
        run_id = store.start_run("fresh", "split", {}, 10)
    live = LiveRun(db, run_id)
    assert live.refresh() == 0 and live.rounds == [] and live.info is not None and live.info.status == "running"
    assert schema_note(db) is None
    with sqlite3.connect(db) as raw:  # what fedsim with schema 1 wrote: no decisions table
        raw.execute("DROP TABLE decisions")
        raw.execute("PRAGMA user_version=1")
    note = schema_note(db)
    assert note is not None and "older fedsim (schema 1" in note
    assert LiveRun(db, run_id).refresh() == 0
    with pytest.raises(StoreProblem, match="Run nope is not in"):
        LiveRun(db, "nope").refresh()


def test_the_bytes_chart_reads_both_spellings_of_uncompressed_bytes() -> None:
    """Stores written before the architecture step say ``uncompressed_bytes``; newer ones ``bytes_uncompressed``."""
    from dashboard.simulation import bytes_figure
    from fedsim.runstore import RoundRow

    rows = [RoundRow("r", k, 1.0, None, None, 10, 20, 1.0, 1.0, 8, 2) for k in range(3)]
    for key in ("uncompressed_bytes", "bytes_uncompressed"):
        live = SimpleNamespace(rounds=rows, metrics=[{key: 100}, {key: 100}, {key: 100}])
        dense = [t for t in bytes_figure(live).data if t.name == "cumulative, uncompressed"]  # type: ignore[arg-type]
        assert [list(t.y) for t in dense] == [pytest.approx([0.1, 0.2, 0.3])]  # in kB, as the axis says
    live = SimpleNamespace(rounds=rows, metrics=[{}, {}, {}])  # the oldest stores record neither
    assert not [t for t in bytes_figure(live).data if t.name == "cumulative, uncompressed"]  # type: ignore[arg-type]
    same = SimpleNamespace(rounds=rows, metrics=[{"bytes_uncompressed": 30}] * 3)  # nothing compressed
    figure = bytes_figure(same)  # type: ignore[arg-type]
    assert [t.name for t in figure.data] == ["up", "down", "cumulative"]  # no second line hidden under the first
    assert figure.layout.yaxis2.title.text == "cumulative kB"


def test_the_bytes_chart_tells_a_compressed_uplink_from_the_dense_one_per_round(tmp_path: Path) -> None:
    from dashboard.simulation import bytes_figure
    from fedsim.config import parse_config
    from fedsim.sim.rounds.engine import Engine

    tree = tiny_config(rounds=3, uplink={"kind": "ef_sign"})
    engine = Engine(parse_config(tree), tmp_path / "out", tmp_path / "runs.db")
    engine.run()
    live = LiveRun(tmp_path / "runs.db", engine.run_id)
    live.refresh()
    figure = bytes_figure(live)
    traces = {t.name: t for t in figure.data}
    assert {"up, compressed", "up, dense", "down"} <= set(traces)
    sent, dense = list(traces["up, compressed"].y), list(traces["up, dense"].y)
    assert len(sent) == len(dense) == 3 and all(d > 20 * s for s, d in zip(sent, dense, strict=True))
    metrics = [{**m, "bytes_up_uncompressed": r.bytes_up} for m, r in zip(live.metrics, live.rounds, strict=True)]
    plain = SimpleNamespace(rounds=live.rounds, metrics=metrics)  # an uplink sent dense: one bar, no line
    assert "up, dense" not in {t.name for t in bytes_figure(plain).data}  # type: ignore[arg-type]
    probed = [{**m, "probe_bytes": 2000} for m in metrics]  # SkewScout's traveling models: half of them up
    rows = [replace(r, bytes_up=r.bytes_up + 1000) for r in live.rounds]
    names = {t.name for t in bytes_figure(SimpleNamespace(rounds=rows, metrics=probed)).data}  # type: ignore[arg-type]
    assert "up, dense" not in names and "SkewScout probes" in names  # probes are not compression


def test_bytes_read_in_decimal_units_and_rounds_tick_at_whole_numbers() -> None:
    from dashboard.figures import accuracy_axis, human_bytes, integer_axis

    assert [human_bytes(n) for n in (512, 3_400, 12_345_678, 1_001_000_000)] == [
        "0.51 kB",
        "3.40 kB",
        "12.3 MB",
        "1.00 GB",
    ]
    assert integer_axis(range(3))["dtick"] == 1 and integer_axis(range(3))["range"] == [-0.5, 2.5]
    assert integer_axis(range(30))["dtick"] == 5 and integer_axis(range(300))["dtick"] == 50
    assert all(integer_axis(range(n))["dtick"] >= (n - 1) / 8 for n in (2, 9, 17, 100, 1001))
    assert accuracy_axis([0.7719, 0.7726]) == {"range": [0.7, 1.01], "tickformat": ".0%"}  # not a 0.07-point window
    assert accuracy_axis([0.02])["range"][0] == 0.0


def test_runs_of_one_name_get_labels_that_tell_them_apart() -> None:
    from dashboard.figures import run_labels
    from fedsim.runstore import RunInfo

    def run(run_id: str, name: str, started: float) -> RunInfo:
        return RunInfo(run_id, name, "simulation", "finished", {}, started, None, 3, 3, None)

    labels = run_labels([run("a-1", "a", 0.0), run("b-1", "b", 0.0), run("b-2", "b", 60.0), run("b-3", "b", 60.0)])
    assert labels["a-1"] == "a"
    assert len(set(labels.values())) == 4 and all(labels[i].startswith("b · ") for i in ("b-1", "b-2", "b-3"))
    assert labels["b-2"].endswith(" · 2") and labels["b-3"].endswith(" · 3")  # one second apart is not apart


def test_a_long_label_is_cut_in_the_name_so_what_tells_runs_apart_stays() -> None:
    from dashboard.figures import shortened

    names = {"a": "quickstart-rounds10-lr0.1", "b": "quickstart-rounds10-lr0.1", "c": "short"}
    labels = {"a": f"{names['a']} · 06:33:59", "b": f"{names['b']} · 06:34:07", "c": "short"}
    cut = shortened(labels, names, 27)
    assert cut["a"] == "quicksta…0-lr0.1 · 06:33:59" and cut["b"].endswith("lr0.1 · 06:34:07")
    assert all(len(v) <= 27 for v in cut.values()) and cut["c"] == "short"
    alike = {"x": "experiment-number-one-alpha", "y": "experiment-number-two-alpha"}
    assert shortened(alike, alike, 12) == shortened(alike, alike, 12)  # never two labels alike
    assert len(set(shortened(alike, alike, 12).values())) == 2
