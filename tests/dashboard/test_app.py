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
