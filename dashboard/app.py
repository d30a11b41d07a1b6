"""``fedsim dashboard``: the Streamlit app over the run store (read-only).

Started by ``fedsim dashboard [--db PATH] [--port N]``, which passes the store's path in ``FEDSIM_DB``.
This first page lists every run; the per-run pages come next.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import streamlit as st

from dashboard.data import StoreProblem, list_runs, schema_note

DEFAULT_DB = "runs/fedsim.db"


def runs_page(db: Path) -> None:
    st.title("fedsim runs")
    st.caption(f"run store: {db}")
    try:
        runs = list_runs(db)
        note = schema_note(db)
    except StoreProblem as exc:
        st.info(str(exc))
        return
    if note:
        st.warning(note)
    kinds = sorted({r.kind for r in runs})
    statuses = sorted({r.status for r in runs})
    left, right = st.columns(2)
    pick_kinds = left.multiselect("kind", kinds, default=kinds)
    pick_status = right.multiselect("status", statuses, default=statuses)
    shown = [r for r in runs if r.kind in pick_kinds and r.status in pick_status]
    rows = []
    for r in shown:
        summary = r.summary or {}
        accuracy = summary.get("final_accuracy", summary.get("test_accuracy"))
        rows.append(
            {
                "run": r.run_id,
                "name": r.name,
                "kind": r.kind,
                "status": r.status,
                "rounds": f"{r.rounds_done}/{r.rounds_planned}",
                "started": datetime.fromtimestamp(r.started_at).strftime("%Y-%m-%d %H:%M:%S"),
                "final accuracy": None if accuracy is None else round(float(accuracy), 4),
            }
        )
    st.dataframe(rows, hide_index=True, use_container_width=True)
    st.caption(f"{len(shown)} of {len(runs)} runs")


runs_page(Path(os.environ.get("FEDSIM_DB", DEFAULT_DB)))
