"""The page of one split fine-tuning run: loss and accuracy per step, bytes per codec, edge clients, edge
devices coming and going (``fedsim serve``), regions.

A step of ``fedsim split`` is a round row; its metrics carry the codec, the fp32 padded bytes the batch would
have been (``bytes_uncompressed``) and, for a run with several cloud regions, tau and the adapter sync bytes.
Each client row is one edge batch: ``device`` is the region that trained it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from itertools import accumulate
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from dashboard.data import LiveRun
from dashboard.escape import plotly_literal
from dashboard.figures import byte_unit, human_bytes, in_unit, nonnegative, one_axis, two_axes
from dashboard.simulation import accuracy_figure, skewscout


def activation_bytes(live: LiveRun) -> list[int]:
    """Each step's activation bytes: a regions run also counts adapter syncs and probes in ``bytes_up``."""
    return [int(m.get("activation_bytes", r.bytes_up)) for r, m in zip(live.rounds, live.metrics, strict=True)]


def codec_table(live: LiveRun, activations: list[int]) -> list[dict[str, Any]]:
    sent: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # steps, bytes on the wire, fp32 padded bytes
    for wire, m in zip(activations, live.metrics, strict=True):
        totals = sent[str(m.get("codec", "?"))]
        totals[0] += 1
        totals[1] += wire
        totals[2] += int(m.get("bytes_uncompressed", 0))
    return [
        {
            "codec": codec,
            "steps": steps,
            "sent": human_bytes(wire),
            "uncompressed": human_bytes(dense) if dense else "-",
            "compression": f"{dense / wire:.1f}x" if dense and wire else "-",
        }
        for codec, (steps, wire, dense) in sent.items()
    ]


def bytes_figure(live: LiveRun, activations: list[int]) -> go.Figure:
    """Activation bytes per step (bars) and their running total; the fp32 padded total beside it, drawn first
    and in grey so that the (much lower) line of what was sent stays on top and visible."""
    steps = [r.round for r in live.rounds]
    sent = list(accumulate(activations))
    dense = []
    if all("bytes_uncompressed" in m for m in live.metrics):
        dense = list(accumulate(int(m["bytes_uncompressed"]) for m in live.metrics))
    per_step, per_size = byte_unit(max(activations or [0]))
    total, total_size = byte_unit(max([*sent, *dense] or [0]))
    fig = go.Figure()
    fig.add_bar(x=steps, y=in_unit(activations, per_size), name="activations sent")
    if dense:
        fig.add_scatter(
            x=steps,
            y=in_unit(dense, total_size),
            name="cumulative, uncompressed fp32",
            yaxis="y2",
            line={"dash": "dot", "color": "grey"},
        )
    fig.add_scatter(x=steps, y=in_unit(sent, total_size), name="cumulative sent", yaxis="y2", line={"color": "black"})
    return two_axes(fig, "step", f"{per_step} per step", f"cumulative {total}", 320, nonnegative(), **nonnegative())


def client_table(live: LiveRun) -> list[dict[str, Any]]:
    """Per edge client: batches, sentences, seconds the cloud spent on them, and sentences per second."""
    seen: dict[int, list[float]] = defaultdict(lambda: [0, 0, 0.0])
    for c in live.clients:
        totals = seen[c.client]
        totals[0] += 1
        totals[1] += c.samples or 0  # a split run stores every client's (no DP)
        totals[2] += max(c.end - c.start, 0.0)
    return [
        {
            "client": client,
            "batches": int(batches),
            "sentences": int(sentences),
            "busy s": round(busy, 2),
            "sentences/s": round(sentences / busy, 1) if busy > 0 else None,
        }
        for client, (batches, sentences, busy) in sorted(seen.items())
    ]


def clients(live: LiveRun) -> None:
    rows = client_table(live)
    st.subheader("Edge clients")
    st.caption(f"{len(rows)} edge clients")
    fig = go.Figure()
    fig.add_bar(x=[f"client {r['client']}" for r in rows], y=[r["sentences/s"] or 0 for r in rows])
    st.plotly_chart(one_axis(fig, None, "sentences / s", 260), width="stretch")
    st.dataframe(rows, hide_index=True)


def active_members(live: LiveRun) -> tuple[list[int], list[int]]:
    """Steps at which membership changed and the members right after each change."""
    steps, active, now = [], [], 0
    for m in live.members:
        now += {"join": 1, "leave": -1, "lost": -1}.get(m.kind, 0)
        steps.append(m.round)
        active.append(now)
    return steps, active


def membership(live: LiveRun) -> None:
    """Devices that joined, left, were lost or took over a partition, over the server's steps."""
    if not live.members:
        return
    st.subheader("Edge devices over time")
    kinds = [m.kind for m in live.members]
    steps, active = active_members(live)
    a, b, c, d = st.columns(4)
    a.metric("members now", active[-1])
    b.metric("joins", kinds.count("join"))
    c.metric("lost", kinds.count("lost"))
    d.metric("takeovers", kinds.count("takeover"))
    fig = go.Figure()
    fig.add_scatter(x=steps, y=active, name="members", line={"shape": "hv"})
    for kind, symbol in (("lost", "x"), ("takeover", "star"), ("standby", "circle-open")):
        marks = [m for m in live.members if m.kind == kind]
        if marks:
            fig.add_scatter(
                x=[m.round for m in marks],
                y=[active[live.members.index(m)] for m in marks],
                mode="markers",
                name=kind,
                text=[plotly_literal(m.device) for m in marks],
                marker={"symbol": symbol, "size": 11},
            )
    devices = nonnegative(tick0=0, dtick=max(1, math.ceil(max(active) / 6)), tickformat="d")
    st.plotly_chart(one_axis(fig, "step", "devices training", 260, **devices), width="stretch")
    st.dataframe(
        [
            {
                "step": m.round,
                "event": m.kind,
                "device": m.device,
                "partition": m.partition if m.partition >= 0 else "-",
            }
            for m in live.members
        ],
        hide_index=True,
    )


def regions(live: LiveRun) -> None:
    if not any("tau" in m for m in live.metrics):
        return
    st.subheader("Regions and adapter syncs")
    steps = [r.round for r in live.rounds]
    syncs = [(s, int(m.get("sync_bytes", 0))) for s, m in zip(steps, live.metrics, strict=True)]
    synced = [s for s, b in syncs if b > 0]
    a, b, c = st.columns(3)
    a.metric("regions", len({c.device for c in live.clients}))
    b.metric("adapter syncs", len(synced))
    c.metric("sync traffic", human_bytes(sum(b for _, b in syncs)))
    fig = go.Figure()
    fig.add_scatter(x=steps, y=[m.get("tau") for m in live.metrics], name="tau", line={"shape": "hv"})
    fig.add_scatter(
        x=synced,
        y=[1] * len(synced),
        mode="markers",
        name="sync",
        yaxis="y2",
        marker={"symbol": "line-ns-open", "size": 14},
    )
    two_axes(fig, "step", "tau (steps between syncs)", "", 260, nonnegative(), visible=False)
    st.plotly_chart(fig, width="stretch")
    skewscout(live, x="step", first=0)


def split_page(live: LiveRun, compare: list[LiveRun]) -> None:
    info = live.info
    assert info is not None
    last = next((r for r in reversed(live.rounds) if r.test_accuracy is not None), None)
    activations = activation_bytes(live)
    sent = sum(activations)
    dense = sum(int(m.get("bytes_uncompressed", 0)) for m in live.metrics)
    accuracy = last.test_accuracy if last else (info.summary or {}).get("test_accuracy")
    a, b, c, d = st.columns(4)
    a.metric("steps", f"{len(live.rounds)}/{info.rounds_planned}")
    b.metric("test accuracy", "-" if accuracy is None else f"{accuracy:.4f}")
    c.metric("compression", f"{dense / sent:.1f}x" if dense and sent else "-")
    d.metric("status", info.status)
    if not live.rounds:
        st.info("No steps yet: this page fills in as the run writes them.")
        return
    st.plotly_chart(accuracy_figure([live, *compare], x="step", first=0), width="stretch")
    st.subheader("Activations on the wire")
    st.plotly_chart(bytes_figure(live, activations), width="stretch")
    st.dataframe(codec_table(live, activations), hide_index=True)
    clients(live)
    membership(live)
    regions(live)
    with st.expander("config"):
        st.json(info.config)
