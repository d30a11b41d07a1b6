"""What a browser session keeps between refreshes: each run's rows fetched so far."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from dashboard.data import LiveRun


def live_run(db: Path, run_id: str) -> LiveRun:
    """The session's LiveRun of ``run_id``: kept between refreshes, so each one fetches only new rows."""
    cache: dict[str, LiveRun] = st.session_state.setdefault("live", {})
    if run_id not in cache:
        cache[run_id] = LiveRun(db, run_id)
    live = cache[run_id]
    live.refresh()
    return live
