"""The page of one simulation run: accuracy and loss, bytes, the device timeline, SkewScout, the config."""

from __future__ import annotations

import json
from datetime import datetime

import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from dashboard.data import LiveRun


def two_axes(fig: go.Figure, x: str, y: str, y2: str, height: int, **y2_extra: str) -> go.Figure:
    """Titles for a figure whose ``yaxis="y2"`` traces share the x axis on a right-hand scale."""
    fig.update_layout(
        xaxis_title=x,
        yaxis={"title": y},
        yaxis2={"title": y2, "overlaying": "y", "side": "right", **y2_extra},
        height=height,
        margin={"t": 30},
    )
    return fig


def accuracy_figure(runs: list[LiveRun]) -> go.Figure:
    fig = go.Figure()
    for live in runs:
        evaluated = [r for r in live.rounds if r.test_accuracy is not None]
        name = live.info.name if live.info else live.run_id
        fig.add_scatter(x=[r.round for r in evaluated], y=[r.test_accuracy for r in evaluated], name=f"{name} accuracy")
        fig.add_scatter(
            x=[r.round for r in live.rounds],
            y=[r.train_loss for r in live.rounds],
            name=f"{name} train loss",
            yaxis="y2",
        )
    return two_axes(fig, "round", "test accuracy", "train loss", 360)


def bytes_figure(live: LiveRun) -> go.Figure:
    rounds = [r.round for r in live.rounds]
    up, down = [r.bytes_up for r in live.rounds], [r.bytes_down for r in live.rounds]
    probes = [json.loads(r.metrics_json).get("probe_bytes", 0) for r in live.rounds]
    fig = go.Figure()
    fig.add_bar(x=rounds, y=up, name="up")
    fig.add_bar(x=rounds, y=down, name="down")
    total, running = [], 0
    for u, d in zip(up, down, strict=True):
        running += u + d
        total.append(running)
    fig.add_scatter(x=rounds, y=total, name="cumulative", yaxis="y2")
    if any(probes):
        fig.add_scatter(x=rounds, y=probes, name="SkewScout probes")
    fig.update_layout(barmode="stack")
    return two_axes(fig, "round", "bytes per round", "cumulative bytes", 320)


def timeline(live: LiveRun, round_: int) -> None:
    turns = [c for c in live.clients if c.round == round_]
    if not turns:
        st.info(f"Round {round_} has no client turns recorded.")
        return
    rows = [
        {
            "device": f"device {c.device}",
            "client": str(c.client),
            "start": datetime.fromtimestamp(c.start),
            "end": datetime.fromtimestamp(max(c.end, c.start + 1e-3)),
            "samples": c.samples,
        }
        for c in turns
    ]
    fig = px.timeline(rows, x_start="start", x_end="end", y="device", color="client", hover_data=["samples"])
    fig.update_layout(height=80 + 40 * len({c.device for c in turns}), showlegend=False, margin={"t": 10})
    st.plotly_chart(fig, use_container_width=True)
    devices = sorted({c.device for c in turns})
    st.caption(f"timeline of round {round_}: {len(turns)} clients on {len(devices)} devices")
    plan = [d for d in live.devices if d.round == round_]
    if plan:
        st.dataframe(
            [
                {"device": d.device, "clients": d.clients, "predicted s": d.predicted_s, "actual s": d.actual_s}
                for d in plan
            ],
            hide_index=True,
        )


def skewscout(live: LiveRun) -> None:
    if not live.decisions:
        return
    st.subheader("SkewScout")
    fig = go.Figure()
    fig.add_scatter(x=[d.round for d in live.decisions], y=[d.estimate for d in live.decisions], name="estimate")
    fig.add_scatter(
        x=[d.round for d in live.decisions], y=[d.new for d in live.decisions], name=live.decisions[0].knob, yaxis="y2"
    )
    two_axes(fig, "round", "estimated loss (points)", live.decisions[0].knob, 300, type="log")
    st.plotly_chart(fig, use_container_width=True)


def simulation_page(live: LiveRun, compare: list[LiveRun]) -> None:
    info = live.info
    assert info is not None
    last = next((r for r in reversed(live.rounds) if r.test_accuracy is not None), None)
    a, b, c, d = st.columns(4)
    a.metric("rounds", f"{len(live.rounds)}/{info.rounds_planned}")
    b.metric("test accuracy", "-" if last is None else f"{last.test_accuracy:.4f}")
    c.metric("bytes up", f"{sum(r.bytes_up for r in live.rounds):,}")
    d.metric("status", info.status)
    if not live.rounds:
        st.info("No rounds yet: this page fills in as the run writes them.")
        return
    st.plotly_chart(accuracy_figure([live, *compare]), use_container_width=True)
    st.plotly_chart(bytes_figure(live), use_container_width=True)
    st.subheader("Device timeline")
    round_ = st.select_slider("round", options=[r.round for r in live.rounds], value=live.rounds[-1].round)
    timeline(live, int(round_))
    skewscout(live)
    with st.expander("config"):
        st.json(info.config)
