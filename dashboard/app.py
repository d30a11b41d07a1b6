"""``fedsim dashboard``: the Streamlit app over the run store (read-only).

Started by ``fedsim dashboard [--db PATH] [--port N]``, which passes the store's path in ``FEDSIM_DB``.
The runs page lists every run; picking one in the sidebar (or opening ``?run=ID``) opens its page, which
refreshes itself every few seconds while the run is running and fetches only the rows written since
(``LiveRun``).
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import streamlit as st

from dashboard.data import StoreProblem, list_runs, schema_note
from dashboard.escape import markdown_literal
from dashboard.figures import run_labels, shortened
from dashboard.session import live_run
from dashboard.simulation import simulation_page
from dashboard.split import split_page
from fedsim.runstore import RunInfo, headline

DEFAULT_DB = "runs/fedsim.db"
ALL_RUNS = "(all runs)"
ROW_PX, MAX_TABLE_ROWS = 35, 40
SIDEBAR_CHARS = 27  # what the sidebar's select box shows of a label at its default width


def runs_page(db: Path, runs: list[RunInfo], problem: StoreProblem | None) -> None:
    st.title("fedsim runs")
    st.caption(markdown_literal(f"run store: {db}"))
    if problem is not None:
        st.info(markdown_literal(str(problem)))
        return
    note = schema_note(db)
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
        task, result = headline(summary)
        rows.append(
            {
                "run": r.run_id,
                "name": r.name,
                "kind": r.kind,
                "status": r.status,
                "rounds": f"{r.rounds_done}/{r.rounds_planned}",
                "started": datetime.fromtimestamp(r.started_at).strftime("%Y-%m-%d %H:%M:%S"),
                "final accuracy": None if accuracy is None else round(float(accuracy), 4),
                "task": task,
                "result": result,  # the task's headline: "accuracy 0.9444", "mse 0.0353", "perplexity 3.2"
            }
        )
    # every row in view without an inner scroll box (a 10-row box above empty space), up to MAX_TABLE_ROWS
    height = ROW_PX * (min(len(rows), MAX_TABLE_ROWS) + 1) + 3
    st.dataframe(rows, hide_index=True, width="stretch", height=height, row_height=ROW_PX)
    st.caption(f"{len(shown)} of {len(runs)} runs")


def run_page(db: Path, run_id: str, compare: list[str], running: bool) -> None:
    st.title(markdown_literal(run_id), anchor=False)

    def panels() -> None:
        try:
            live = live_run(db, run_id)
            others = [live_run(db, other) for other in compare if other != run_id]
        except StoreProblem as exc:
            st.info(markdown_literal(str(exc)))
            return
        page = split_page if live.info is not None and live.info.kind == "split" else simulation_page
        page(live, others)

    if running:
        st.fragment(panels, run_every="3s")()
    else:
        panels()


def sidebar_labels(runs: list[RunInfo]) -> dict[str, str]:
    """Each run as the sidebar shows it: same-named runs apart (:func:`run_labels`), and a label longer than
    the sidebar cut in the middle of its name, so that what tells runs apart is never cut off."""
    labels = shortened(run_labels(runs), {r.run_id: r.name for r in runs}, SIDEBAR_CHARS)
    return {ALL_RUNS: ALL_RUNS, **labels}


def main() -> None:
    st.set_page_config(page_title="fedsim", layout="wide")
    db = Path(os.environ.get("FEDSIM_DB", DEFAULT_DB))
    try:  # read once per full rerun; a running run's panels then refresh on their own
        runs, problem = list_runs(db), None
    except StoreProblem as exc:
        runs, problem = [], exc
    ids = [r.run_id for r in runs]
    choices = [ALL_RUNS, *ids]
    linked = st.query_params.get("run")  # ?run=ID opens that run's page: links can be shared and bookmarked
    labels = sidebar_labels(runs)
    picked = st.sidebar.selectbox(
        "run", choices, index=choices.index(linked) if linked in choices else 0, format_func=lambda i: labels.get(i, i)
    )
    compare = st.sidebar.multiselect(
        "compare with", [i for i in ids if i != picked], format_func=lambda i: labels.get(i, i)
    )
    if picked == ALL_RUNS:
        st.query_params.pop("run", None)
        runs_page(db, runs, problem)
        return
    st.query_params["run"] = picked
    running = any(r.run_id == picked and r.status == "running" for r in runs)
    run_page(db, picked, compare, running)


main()
