"""Rendering the Streamlit app with AppTest against a run store (the dashboard tests' one way in)."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")


def render(db: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv("FEDSIM_DB", str(db))
    app = AppTest.from_file(APP, default_timeout=30)
    app.run()
    assert not app.exception
    return app
