"""The Streamlit app rendered with AppTest against real stores: what a user sees on the runs page."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import RunFactory, tiny_config

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def render(db: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("FEDSIM_DB", str(db))
    app = AppTest.from_file(APP, default_timeout=30)
    app.run()
    assert not app.exception
    return app


def test_empty_and_missing_stores_show_a_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = render(tmp_path / "none.db", monkeypatch)
    assert "No run store at" in app.info[0].value
    from fedsim.runstore import RunStore

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
    assert timeline == ["timeline of round 2: 5 clients on 2 devices"]
    assert len(app.get("plotly_chart")) >= 3


def test_a_running_run_without_rounds_and_then_with_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fedsim.runstore import RoundRow, RunStore

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
