"""The page of one simulation run: accuracy and loss, bytes, the device timeline, SkewScout, the config."""

from __future__ import annotations

from datetime import datetime
from itertools import accumulate
from typing import Any

import plotly.express as px
import plotly.graph_objects as go
import streamlit as st

from dashboard.attacks import attacks
from dashboard.clock import virtual_clock
from dashboard.data import LiveRun
from dashboard.escape import markdown_literal, plotly_literal
from dashboard.figures import (
    LEGEND,
    NO_TOOLBAR,
    accuracy_axis,
    byte_unit,
    human_bytes,
    in_unit,
    nonnegative,
    one_axis,
    run_labels,
    shown,
    two_axes,
)
from dashboard.gossip import decentralised, leaders
from dashboard.privacy import differential_privacy, secure_aggregation
from dashboard.sweep import sweep_panel
from fedsim.runstore import ClientRow


def accuracy_figure(runs: list[LiveRun], x: str = "round", first: int = 1) -> go.Figure:
    """Test accuracy (left) and training loss (right); loss alone on the left when nothing was evaluated yet.
    Runs of the same name are told apart by when they started. ``first`` is the number shown for the store's
    round 0: a simulation's log counts rounds from 1 ("round 10/10"), and so does its page; a split run's
    steps are stored from 1 already (``first=0``)."""
    fig = go.Figure()
    evaluated = {live.run_id: [r for r in live.rounds if r.test_accuracy is not None] for live in runs}
    loss_axis = "y2" if any(evaluated.values()) else "y"
    labels = run_labels([live.info for live in runs if live.info is not None])
    for live in runs:
        name = plotly_literal(labels.get(live.run_id, live.run_id))
        if evaluated[live.run_id]:
            points = evaluated[live.run_id]
            fig.add_scatter(
                x=[r.round + first for r in points],
                y=[r.test_accuracy for r in points],
                name=f"{name} accuracy",
                mode="lines+markers",
            )
        fig.add_scatter(
            x=[r.round + first for r in live.rounds],
            y=[r.train_loss for r in live.rounds],
            name=f"{name} train loss",
            yaxis=loss_axis,
        )
    if loss_axis == "y":
        return one_axis(fig, x, "train loss", 360, **nonnegative())
    accuracies = [float(r.test_accuracy or 0.0) for points in evaluated.values() for r in points]
    return two_axes(fig, x, "test accuracy", "train loss", 360, accuracy_axis(accuracies), **nonnegative())


HEADLINE = {"classification": "accuracy", "regression": "mse", "language_model": "perplexity", "python": "loss"}


def federated_figure(live: LiveRun) -> go.Figure | None:
    """The metric on clients' own held-out data per round: the mean, with the 10th-90th percentile band (and
    the personal models' when the algorithm has them); None when the run has no federated evaluation."""
    points = [
        (shown(r.round), m["fed_eval"]) for r, m in zip(live.rounds, live.metrics, strict=True) if m.get("fed_eval")
    ]
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
    """Bytes up and down per round (bars) and their running total; where an uplink compressor made a difference,
    the dense uplink per round beside the compressed bars, and the uncompressed total beside the running one
    (otherwise the two lines would be one, the second hidden under the first)."""
    rounds = [shown(r.round) for r in live.rounds]
    up, down = [r.bytes_up for r in live.rounds], [r.bytes_down for r in live.rounds]
    probes = [m.get("probe_bytes", 0) for m in live.metrics]
    sent = list(accumulate(u + d for u, d in zip(up, down, strict=True)))
    # one spelling since the architecture step; older stores say uncompressed_bytes, the oldest neither
    uncompressed = [m.get("bytes_uncompressed", m.get("uncompressed_bytes")) for m in live.metrics]
    dense = list(accumulate(int(v or 0) for v in uncompressed)) if all(v is not None for v in uncompressed) else []
    compressed = bool(dense) and dense != sent
    dense_up = [int(m.get("bytes_up_uncompressed", -1)) for m in live.metrics]  # -1: a run from before it
    clients_up = [u - p // 2 for u, p in zip(up, probes, strict=True)]  # bytes_up counts the probes' upload half
    compressed_up = min(dense_up, default=-1) >= 0 and dense_up != clients_up
    highest = [u + d + p for u, d, p in zip(up, down, probes, strict=True)] + (dense_up if compressed_up else [])
    per_round, per_size = byte_unit(max(highest or [0]))
    total, total_size = byte_unit(max([*sent, *(dense if compressed else [])] or [0]))
    fig = go.Figure()
    fig.add_bar(x=rounds, y=in_unit(up, per_size), name="up, compressed" if compressed_up else "up")
    fig.add_bar(x=rounds, y=in_unit(down, per_size), name="down")
    if any(probes):
        fig.add_bar(x=rounds, y=in_unit(probes, per_size), name="SkewScout probes")
    fig.add_scatter(x=rounds, y=in_unit(sent, total_size), name="cumulative", yaxis="y2", line={"color": "black"})
    if compressed:
        fig.add_scatter(
            x=rounds,
            y=in_unit(dense, total_size),
            name="cumulative, uncompressed",
            yaxis="y2",
            line={"dash": "dot", "color": "grey"},
        )
    if compressed_up:  # what each round's uplink would have cost dense, beside what it cost
        fig.add_scatter(
            x=rounds, y=in_unit(dense_up, per_size), name="up, dense", mode="lines+markers", line={"dash": "dash"}
        )
    fig.update_layout(barmode="stack")
    return two_axes(fig, "round", f"{per_round} per round", f"cumulative {total}", 320, nonnegative(), **nonnegative())


COLOUR_BY = ("training or idle", "loss", "client")
ACTIVITY_COLOURS = {"training": "#1f77b4", "idle": "#d9d9d9"}


def timeline_rows(turns: list[ClientRow], devices: list[int], colour: str) -> list[dict[str, Any]]:
    """One bar per client turn; coloured "training or idle", each device's gaps in the round (from its first
    start to its last end) become "idle" bars, so a device waiting on others shows as grey."""
    rows: list[dict[str, Any]] = [
        {
            "device": f"device {c.device}",
            "client": str(c.client),
            "activity": "training",
            "loss": c.loss,
            "start": datetime.fromtimestamp(c.start),
            "end": datetime.fromtimestamp(max(c.end, c.start + 1e-3)),
            "samples": c.samples,
        }
        for c in turns
    ]
    if colour != "training or idle":
        return rows
    begin, finish = min(c.start for c in turns), max(c.end for c in turns)
    for device in devices:
        busy = sorted((c.start, c.end) for c in turns if c.device == device)
        edges = [begin, *(t for span in busy for t in span), finish]
        for idle_from, idle_to in zip(edges[::2], edges[1::2], strict=True):
            if idle_to > idle_from:
                rows.append(
                    {
                        "device": f"device {device}",
                        "client": "-",
                        "activity": "idle",
                        "loss": None,
                        "start": datetime.fromtimestamp(idle_from),
                        "end": datetime.fromtimestamp(idle_to),
                        "samples": 0,
                    }
                )
    return rows


def timeline(live: LiveRun, round_: int) -> None:
    """The device timeline of round ``round_`` as the page counts rounds (from 1)."""
    turns = [c for c in live.clients if shown(c.round) == round_]
    if not turns:
        st.info(f"Round {round_} has no client turns recorded.")
        return
    plan = [d for d in live.devices if shown(d.round) == round_]
    devices = sorted({d.device for d in plan} | {c.device for c in turns})  # the pool, idle devices included
    colour = st.radio("colour by", COLOUR_BY, horizontal=True, key=f"colour-{live.run_id}")
    if colour == "loss" and all(c.loss is None for c in turns):
        st.caption("No client losses recorded in this round: coloured by training or idle instead.")
        colour = "training or idle"
    rows = timeline_rows(turns, devices, colour)
    by = {"training or idle": "activity", "loss": "loss", "client": "client"}[colour]
    fig = px.timeline(
        rows,
        x_start="start",
        x_end="end",
        y="device",
        color=by,
        hover_data=["client", "samples", "loss"],
        color_discrete_map=ACTIVITY_COLOURS if by == "activity" else None,
    )
    fig.update_yaxes(categoryorder="array", categoryarray=[f"device {d}" for d in devices], autorange="reversed")
    fig.update_yaxes(title=None)
    legend = by == "activity" or (by == "client" and len({c.client for c in turns}) <= 20)
    fig.update_layout(height=120 + 40 * len(devices), showlegend=legend, margin={"t": 30}, legend=LEGEND)
    st.plotly_chart(fig, width="stretch", config=NO_TOOLBAR)  # the toolbar would cover device 0's bars
    st.caption(f"timeline of round {round_}: {len(turns)} clients on {len(devices)} devices")
    metrics = next((m for r, m in zip(live.rounds, live.metrics, strict=True) if shown(r.round) == round_), {})
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
    last = shown(live.rounds[-1].round)
    left, right = st.columns([1, 3])
    follow = left.toggle("follow the latest round", value=True, key=f"follow-{live.run_id}")
    if follow:
        return last
    wanted = right.number_input("round", min_value=1, value=last, step=1, key=f"round-{live.run_id}")
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
    b.metric("state in memory", human_bytes(last["state_memory_bytes"]))
    c.metric("state on disk", human_bytes(last["state_disk_bytes"]))
    rounds = [shown(r.round) for r in live.rounds]
    keys = (("state_memory_bytes", "in memory"), ("state_disk_bytes", "on disk"))
    unit, size = byte_unit(max(m.get(key, 0) for m in live.metrics for key, _ in keys))
    fig = go.Figure()
    for key, name in keys:
        fig.add_scatter(x=rounds, y=in_unit((m.get(key, 0) for m in live.metrics), size), name=name)
    st.plotly_chart(one_axis(fig, "round", unit, 260, **nonnegative()), width="stretch")


def skewscout(live: LiveRun, x: str = "round", first: int = 1) -> None:
    if not live.decisions:
        return
    st.subheader("SkewScout")
    fig = go.Figure()
    fig.add_scatter(
        x=[d.round + first for d in live.decisions], y=[d.estimate for d in live.decisions], name="estimate"
    )
    fig.add_scatter(
        x=[d.round + first for d in live.decisions],
        y=[d.new for d in live.decisions],
        name=plotly_literal(live.decisions[0].knob),
        yaxis="y2",
    )
    two_axes(fig, x, "estimated loss (points)", plotly_literal(live.decisions[0].knob), 300, {}, type="log")
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
    c.metric("bytes up", human_bytes(sum(r.bytes_up for r in live.rounds)))
    d.metric("status", info.status)
    summary = info.summary or {}
    accelerator = summary.get("accelerator", info.config.get("accelerator", "cpu"))
    executor = summary.get("executor", "sequential")
    st.caption(markdown_literal(f"executor {executor} on accelerator {accelerator}"))  # store strings: plain text
    if not live.rounds:
        st.info("No rounds yet: this page fills in as the run writes them.")
        return
    st.plotly_chart(accuracy_figure([live, *compare]), width="stretch")
    virtual_clock(live, compare)
    decentralised(live)
    leaders(live)
    sweep_panel(live)
    differential_privacy(live)
    attacks(live)
    federated = federated_figure(live)
    if federated is not None:
        st.subheader("Federated evaluation")
        st.plotly_chart(federated, width="stretch")
    st.plotly_chart(bytes_figure(live), width="stretch")
    secure_aggregation(live)
    st.subheader("Device timeline")
    timeline(live, pick_round(live))
    state_store(live)
    skewscout(live)
    with st.expander("config"):
        st.json(info.config)
