"""A sweep's panel (``fedsim sweep``): every run of the grid side by side, their final accuracies in one bar
chart and their accuracy curves in one figure. A run belongs to the sweep its name says (``SWEEP.gNN-...``)."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from dashboard.data import LiveRun, list_runs
from dashboard.escape import markdown_literal, plotly_literal
from dashboard.figures import accuracy_axis, one_axis, shown
from dashboard.session import live_run
from fedsim.runstore import sweep_of


def sweep_members(live: LiveRun) -> list[LiveRun]:
    """The runs of the sweep ``live`` belongs to (itself included), in grid order; [] for a run of its own."""
    sweep = sweep_of(live.info.name) if live.info is not None else None
    if sweep is None:
        return []
    infos = sorted((r for r in list_runs(live.path) if sweep_of(r.name) == sweep), key=lambda r: r.name)
    # the session's own copies: a refresh every few seconds fetches only each run's new rows
    return [live if info.run_id == live.run_id else live_run(live.path, info.run_id) for info in infos]


def _label(member: LiveRun) -> str:
    name = member.info.name if member.info is not None else member.run_id
    sweep = sweep_of(name) or ""
    return plotly_literal(name[len(sweep) + 1 :])  # gNN-label: the grid point


def finals_figure(members: list[LiveRun]) -> go.Figure:
    """Each run's latest test accuracy (its final one once finished)."""
    finals = []
    for member in members:
        scored = [r.test_accuracy for r in member.rounds if r.test_accuracy is not None]
        finals.append(scored[-1] if scored else None)
    fig = go.Figure(go.Bar(x=[_label(m) for m in members], y=finals, name="final accuracy"))
    return one_axis(fig, None, "test accuracy", 340, **accuracy_axis([f for f in finals if f is not None]))


def curves_figure(members: list[LiveRun]) -> go.Figure:
    fig = go.Figure()
    accuracies: list[float] = []
    for member in members:
        points = [r for r in member.rounds if r.test_accuracy is not None]
        accuracies += [float(r.test_accuracy or 0.0) for r in points]
        fig.add_scatter(
            x=[shown(r.round) for r in points], y=[r.test_accuracy for r in points], name=_label(member), mode="lines"
        )
    return one_axis(fig, "round", "test accuracy", 380, **accuracy_axis(accuracies))


def sweep_panel(live: LiveRun) -> None:
    members = sweep_members(live)
    if not members:
        return
    sweep = sweep_of(live.info.name) if live.info is not None else ""
    st.subheader(markdown_literal(f"Sweep {sweep}"))
    done = sum(1 for m in members if m.info is not None and m.info.status == "finished")
    st.caption(f"{len(members)} runs of the grid, {done} finished")
    st.plotly_chart(finals_figure(members), width="stretch")
    st.plotly_chart(curves_figure(members), width="stretch")
