"""The page of one simulation run: accuracy and loss, bytes, the device timeline, SkewScout, the config."""

from __future__ import annotations

from datetime import datetime
from itertools import accumulate
from typing import Any

import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from dashboard.data import LiveRun
from dashboard.escape import plotly_literal

LEGEND = {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"}  # above the plot, clear of the right axis


def one_axis(fig: go.Figure, x: str | None, y: str, height: int) -> go.Figure:
    """Titles, height and the legend above the plot: the layout every dashboard figure shares."""
    fig.update_layout(xaxis_title=x, yaxis={"title": y}, height=height, margin={"t": 40}, legend=LEGEND)
    return fig


def two_axes(fig: go.Figure, x: str, y: str, y2: str, height: int, **y2_extra: Any) -> go.Figure:
    """:func:`one_axis` for a figure whose ``yaxis="y2"`` traces share the x axis on a right-hand scale."""
    fig.update_layout(yaxis2={"title": y2, "overlaying": "y", "side": "right", **y2_extra})
    return one_axis(fig, x, y, height)


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def accuracy_figure(runs: list[LiveRun], x: str = "round") -> go.Figure:
    """Test accuracy (left) and training loss (right); loss alone on the left when nothing was evaluated yet."""
    fig = go.Figure()
    evaluated = {live.run_id: [r for r in live.rounds if r.test_accuracy is not None] for live in runs}
    loss_axis = "y2" if any(evaluated.values()) else "y"
    for live in runs:
        name = plotly_literal(live.info.name if live.info else live.run_id)
        if evaluated[live.run_id]:
            points = evaluated[live.run_id]
            fig.add_scatter(x=[r.round for r in points], y=[r.test_accuracy for r in points], name=f"{name} accuracy")
        fig.add_scatter(
            x=[r.round for r in live.rounds],
            y=[r.train_loss for r in live.rounds],
            name=f"{name} train loss",
            yaxis=loss_axis,
        )
    if loss_axis == "y":
        return one_axis(fig, x, "train loss", 360)
    return two_axes(fig, x, "test accuracy", "train loss", 360)


HEADLINE = {"classification": "accuracy", "regression": "mse", "language_model": "perplexity", "python": "loss"}


def federated_figure(live: LiveRun) -> go.Figure | None:
    """The metric on clients' own held-out data per round: the mean, with the 10th-90th percentile band (and
    the personal models' when the algorithm has them); None when the run has no federated evaluation."""
    points = [(r.round, m["fed_eval"]) for r, m in zip(live.rounds, live.metrics, strict=True) if m.get("fed_eval")]
    if not points:
        return None
    fig = go.Figure()
    rounds = [p[0] for p in points]
    for prefix, name, colour in (("", "global model", "31, 119, 180"), ("personal_", "personal models", "214, 39, 40")):
        if f"{prefix}mean" not in points[-1][1]:
            continue
        lo, hi = [p[1][f"{prefix}p10"] for p in points], [p[1][f"{prefix}p90"] for p in points]
        fig.add_scatter(
            x=rounds + rounds[::-1],
            y=hi + lo[::-1],
            fill="toself",
            fillcolor=f"rgba({colour}, 0.2)",
            line={"width": 0},
            name=f"{name} p10-p90",
            hoverinfo="skip",
        )
        fig.add_scatter(
            x=rounds, y=[p[1][f"{prefix}mean"] for p in points], name=f"{name} mean", line={"color": f"rgb({colour})"}
        )
    metric = str(points[-1][1]["metric"])
    return one_axis(fig, "round", f"{metric} on clients' held-out data", 300)


def bytes_figure(live: LiveRun) -> go.Figure:
    rounds = [r.round for r in live.rounds]
    up, down = [r.bytes_up for r in live.rounds], [r.bytes_down for r in live.rounds]
    probes = [m.get("probe_bytes", 0) for m in live.metrics]
    fig = go.Figure()
    fig.add_bar(x=rounds, y=up, name="up")
    fig.add_bar(x=rounds, y=down, name="down")
    fig.add_scatter(
        x=rounds, y=list(accumulate(u + d for u, d in zip(up, down, strict=True))), name="cumulative", yaxis="y2"
    )
    # one spelling since the architecture step; older stores say uncompressed_bytes, the oldest neither
    uncompressed = [m.get("bytes_uncompressed", m.get("uncompressed_bytes")) for m in live.metrics]
    if all(v is not None for v in uncompressed):
        dense = list(accumulate(int(v or 0) for v in uncompressed))
        fig.add_scatter(x=rounds, y=dense, name="cumulative, uncompressed", yaxis="y2", line={"dash": "dot"})
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
    plan = [d for d in live.devices if d.round == round_]
    devices = sorted({d.device for d in plan} | {c.device for c in turns})  # the pool, idle devices included
    fig = px.timeline(rows, x_start="start", x_end="end", y="device", color="client", hover_data=["samples"])
    fig.update_yaxes(categoryorder="array", categoryarray=[f"device {d}" for d in devices], autorange="reversed")
    fig.update_yaxes(title=None)
    fig.update_layout(height=80 + 40 * len(devices), showlegend=False, margin={"t": 10})
    st.plotly_chart(fig, width="stretch")
    st.caption(f"timeline of round {round_}: {len(turns)} clients on {len(devices)} devices")
    metrics = next((m for r, m in zip(live.rounds, live.metrics, strict=True) if r.round == round_), {})
    stalls = metrics.get("stall_share") or []  # recorded since the executor seam; older runs lack it
    if plan:
        st.dataframe(
            [
                {
                    "device": d.device,
                    "clients": d.clients,
                    "predicted s": d.predicted_s,
                    "actual s": d.actual_s,
                    "data stall": f"{stalls[d.device]:.1%}" if d.device < len(stalls) else "-",
                }
                for d in plan
            ],
            hide_index=True,
        )


def pick_round(live: LiveRun) -> int:
    """The latest round while "follow" is on (the page then moves with a running run), else the one typed in.

    The widgets keep fixed parameters and keys: a widget whose options grow with every refresh would be a new
    widget each time and lose what the user chose.
    """
    last = live.rounds[-1].round
    left, right = st.columns([1, 3])
    follow = left.toggle("follow the latest round", value=True, key=f"follow-{live.run_id}")
    if follow:
        return last
    wanted = right.number_input("round", min_value=0, value=last, step=1, key=f"round-{live.run_id}")
    return min(int(wanted), last)


def state_store(live: LiveRun) -> None:
    last = live.metrics[-1] if live.metrics else {}
    if "state_clients" not in last:
        return
    st.subheader("Client state store")
    if not any(m.get("state_clients") for m in live.metrics):
        st.caption("No client state: this algorithm keeps none between rounds.")
        return
    a, b, c = st.columns(3)
    a.metric("clients with state", f"{last['state_clients']:,}")
    b.metric("state in memory", mib(last["state_memory_bytes"]))
    c.metric("state on disk", mib(last["state_disk_bytes"]))
    rounds = [r.round for r in live.rounds]
    fig = go.Figure()
    for key, name in (("state_memory_bytes", "in memory"), ("state_disk_bytes", "on disk")):
        fig.add_scatter(x=rounds, y=[m.get(key, 0) for m in live.metrics], name=name)
    st.plotly_chart(one_axis(fig, "round", "bytes", 260), width="stretch")


def skewscout(live: LiveRun, x: str = "round") -> None:
    if not live.decisions:
        return
    st.subheader("SkewScout")
    fig = go.Figure()
    fig.add_scatter(x=[d.round for d in live.decisions], y=[d.estimate for d in live.decisions], name="estimate")
    fig.add_scatter(
        x=[d.round for d in live.decisions], y=[d.new for d in live.decisions], name=live.decisions[0].knob, yaxis="y2"
    )
    two_axes(fig, x, "estimated loss (points)", live.decisions[0].knob, 300, type="log")
    st.plotly_chart(fig, width="stretch")


def simulation_page(live: LiveRun, compare: list[LiveRun]) -> None:
    info = live.info
    assert info is not None
    headline = HEADLINE.get(str((info.config.get("task") or {}).get("kind", "classification")), "accuracy")
    scored = [m[f"test_{headline}"] for m in live.metrics if f"test_{headline}" in m]
    if headline == "accuracy":  # runs from before tasks kept accuracy only in its column
        scored = [r.test_accuracy for r in live.rounds if r.test_accuracy is not None]
    a, b, c, d = st.columns(4)
    a.metric("rounds", f"{len(live.rounds)}/{info.rounds_planned}")
    b.metric(f"test {headline}", f"{scored[-1]:.4f}" if scored else "-")
    c.metric("bytes up", f"{sum(r.bytes_up for r in live.rounds):,}")
    d.metric("status", info.status)
    summary = info.summary or {}
    accelerator = summary.get("accelerator", info.config.get("accelerator", "cpu"))
    st.caption(f"executor {summary.get('executor', 'sequential')} on accelerator {accelerator}")
    if not live.rounds:
        st.info("No rounds yet: this page fills in as the run writes them.")
        return
    st.plotly_chart(accuracy_figure([live, *compare]), width="stretch")
    federated = federated_figure(live)
    if federated is not None:
        st.subheader("Federated evaluation")
        st.plotly_chart(federated, width="stretch")
    st.plotly_chart(bytes_figure(live), width="stretch")
    st.subheader("Device timeline")
    timeline(live, pick_round(live))
    state_store(live)
    skewscout(live)
    with st.expander("config"):
        st.json(info.config)
