"""An asynchronous run's panel: the virtual clock. Accuracy against virtual seconds (beside compared runs on the
same clock: the synchronous baseline and the asynchronous rules side by side), and the clients in flight and the
staleness of the updates applied, step by step against the clock."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import streamlit as st

from dashboard.data import LiveRun
from dashboard.escape import markdown_literal, plotly_literal
from dashboard.figures import accuracy_axis, nonnegative, one_axis, run_labels, two_axes


def on_clock(live: LiveRun) -> list[tuple[Any, dict[str, Any]]]:
    """The run's steps that carry the virtual clock (asynchronous runs' rounds do)."""
    return [(r, m) for r, m in zip(live.rounds, live.metrics, strict=True) if m.get("clock_s") is not None]


def mode_of(live: LiveRun) -> str:
    """The run's asynchronous kind (``mode`` in runs stored before it was spelled ``kind``), or ``sync`` for a
    synchronous run on the trace clock."""
    config = live.info.config if live.info is not None else {}
    kind = kind_of(config.get("asynchronous") or {})
    return "sync" if kind in ("none", "off") else kind


def kind_of(section: dict[str, Any]) -> str:
    return str(section.get("kind", section.get("mode", "none")))


def accuracy_by_clock(runs: list[LiveRun]) -> go.Figure:
    fig = go.Figure()
    scores: list[float] = []
    labels = run_labels([live.info for live in runs if live.info is not None])
    for live in runs:
        points = [(m["clock_s"], r.test_accuracy) for r, m in on_clock(live) if r.test_accuracy is not None]
        if points:
            name = plotly_literal(f"{labels.get(live.run_id, live.run_id)} ({mode_of(live)})")
            fig.add_scatter(x=[p[0] for p in points], y=[p[1] for p in points], name=name, mode="lines+markers")
            scores += [float(p[1]) for p in points]
    return one_axis(fig, "virtual seconds", "test accuracy", 320, **accuracy_axis(scores or [0.0]))


def flight_figure(steps: list[tuple[Any, dict[str, Any]]]) -> go.Figure:
    fig = go.Figure()
    x = [m["clock_s"] for _, m in steps]
    fig.add_scatter(x=x, y=[m["in_flight"] for _, m in steps], name="clients in flight", line={"shape": "hv"})
    stale = [(m["clock_s"], m["staleness_mean"]) for _, m in steps if m.get("staleness_mean") is not None]
    fig.add_scatter(x=[s[0] for s in stale], y=[s[1] for s in stale], name="mean staleness", yaxis="y2")
    return two_axes(fig, "virtual seconds", "clients in flight", "staleness (server steps)", 300, nonnegative(),
                    **nonnegative())  # fmt: skip


def virtual_clock(live: LiveRun, compare: list[LiveRun]) -> None:
    """The clock panel, for a run whose rounds carry it."""
    steps = on_clock(live)
    if not steps:
        return
    st.subheader("Virtual clock")
    last = steps[-1][1]
    applied = sum(len(m.get("applied", [])) for _, m in steps)
    dropped = sum(len(m.get("dropped_clients", [])) for _, m in steps)
    a, b, c, d = st.columns(4)
    a.metric("virtual time", f"{last['clock_s']:,.1f} s")
    b.metric("updates applied", f"{applied:,}")
    c.metric("dropped mid-task", f"{dropped:,}")
    d.metric("staleness, latest step", f"{last['staleness_max']}")
    run = live.info.config if live.info is not None else {}
    config, mode = run.get("asynchronous") or {}, mode_of(live)
    if mode == "sync" and kind_of(config) == "sync":  # stored before it was a synchronous run on the clock
        caption = f"synchronous, {config.get('buffer')} a round of {config.get('concurrency')} started"
    elif mode == "sync":  # a synchronous run on the trace clock
        over = (run.get("clock") or {}).get("over_select", 0)
        caption = f"synchronous, {run.get('clients_per_round')} a round, {over} over-selected"
    else:
        caption = f"kind {mode}, {config.get('concurrency')} in flight"
        caption += f", buffer {config['buffer']}" if mode != "fedasync" else ""
    st.caption(markdown_literal(caption))
    st.plotly_chart(accuracy_by_clock([live, *[o for o in compare if on_clock(o)]]), width="stretch")
    st.plotly_chart(flight_figure(steps), width="stretch")
