"""A decentralised run's panel: the graph its nodes gossip over, each node coloured by its latest batch loss,
and the consensus distance round by round beside the average model's accuracy."""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from dashboard.data import LiveRun
from dashboard.figures import accuracy_axis, one_axis, shown, two_axes

DIRECTED = ("exponential",)  # graphs whose edges point one way: drawn with arrows


def consensus_figure(live: LiveRun) -> go.Figure | None:
    """(1/n) sum_i ||x_i - x_bar||^2 each round (right, log scale) beside the average model's test accuracy."""
    distance = [(shown(r.round), m["consensus_distance"]) for r, m in zip(live.rounds, live.metrics, strict=True)]
    distance = [(x, d) for x, d in distance if d is not None and d > 0]
    if not distance:
        return None
    fig = go.Figure()
    scored = [(shown(r.round), r.test_accuracy) for r in live.rounds if r.test_accuracy is not None]
    fig.add_scatter(x=[s[0] for s in scored], y=[s[1] for s in scored], name="average model's accuracy")
    fig.add_scatter(x=[d[0] for d in distance], y=[d[1] for d in distance], name="consensus distance", yaxis="y2")
    accuracies = [float(s[1] or 0.0) for s in scored]
    return two_axes(fig, "round", "test accuracy", "consensus distance", 320, accuracy_axis(accuracies), type="log")


def topology_figure(graph: dict[str, Any], losses: dict[int, float]) -> go.Figure:
    """The nodes on a circle, an edge from each sender to each node that hears it, nodes coloured by loss."""
    n, edges = int(graph["nodes"]), graph["edges"]
    xy = [(math.cos(2 * math.pi * i / n), math.sin(2 * math.pi * i / n)) for i in range(n)]
    fig = go.Figure()
    xs: list[float | None] = []
    ys: list[float | None] = []
    for sender, receiver in edges:
        xs += [xy[sender][0], xy[receiver][0], None]
        ys += [xy[sender][1], xy[receiver][1], None]
    fig.add_scatter(x=xs, y=ys, mode="lines", name="edges", line={"width": 1, "color": "#9aa5b1"}, hoverinfo="skip")
    if graph.get("topology") in DIRECTED:
        for sender, receiver in edges:
            fig.add_annotation(
                x=xy[receiver][0], y=xy[receiver][1], ax=xy[sender][0], ay=xy[sender][1], xref="x", yref="y",
                axref="x", ayref="y", showarrow=True, arrowhead=2, arrowsize=1, arrowwidth=1, arrowcolor="#9aa5b1",
                standoff=6, text="",
            )  # fmt: skip
    colour = [losses.get(i) for i in range(n)]
    marker: dict[str, Any] = {"size": 14 if n <= 64 else 8}
    if all(c is not None for c in colour):
        marker |= {"color": colour, "colorscale": "Viridis", "colorbar": {"title": "loss"}, "showscale": True}
    fig.add_scatter(
        x=[p[0] for p in xy], y=[p[1] for p in xy], mode="markers", name="nodes", marker=marker,
        text=[f"node {i}" + ("" if colour[i] is None else f": loss {colour[i]:.3f}") for i in range(n)],
        hoverinfo="text",
    )  # fmt: skip
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, scaleanchor="x")
    return one_axis(fig, None, "", 420)


def decentralised(live: LiveRun) -> None:
    """The panel, for a run whose rounds record a consensus distance (a topology run); nothing otherwise."""
    if not any("consensus_distance" in m for m in live.metrics):
        return
    st.subheader("Decentralised training")
    graph = live.metrics[0] if live.metrics and "edges" in live.metrics[0] else None
    topology = (live.info.config.get("topology") or {}).get("kind", "?") if live.info is not None else "?"
    a, b, c = st.columns(3)
    a.metric("topology", str(topology))
    b.metric("nodes", str(live.rounds[-1].clients))
    latest = live.metrics[-1].get("consensus_distance")
    c.metric("consensus distance", "-" if latest is None else f"{latest:.3g}")
    figure = consensus_figure(live)
    if figure is not None:
        st.plotly_chart(figure, width="stretch")
    if graph is None:
        st.caption("The graph has more nodes than the dashboard draws.")
        return
    last = live.last_round
    losses = {c.client: c.loss for c in live.clients if c.round == last and c.loss is not None}
    st.plotly_chart(topology_figure(graph, losses), width="stretch")
    st.caption(f"Nodes coloured by their batch loss in round {shown(last)}.")


def leaders(live: LiveRun) -> None:
    """LGD's elections (decentralised or federated): the global leader each election round, so a client that
    leads round after round (under label skew, the one with the fewest classes) shows as a flat line."""
    rounds = zip(live.rounds, live.metrics, strict=True)
    elected = [(shown(r.round), int(m["leader"])) for r, m in rounds if "leader" in m]
    if not elected:
        return
    st.subheader("Leaders")
    a, b, c = st.columns(3)
    a.metric("elections", str(len(elected)))
    latest = elected[-1][1]
    b.metric("global leader", str(latest))
    c.metric("distinct global leaders", str(len({e[1] for e in elected})))
    fig = go.Figure()
    fig.add_scatter(x=[e[0] for e in elected], y=[e[1] for e in elected], mode="markers+lines", name="global leader")
    st.plotly_chart(one_axis(fig, "round", "client", 280), width="stretch")
    held = sum(1 for e in elected if e[1] == latest)
    st.caption(f"Client {latest} led {held} of the {len(elected)} elections so far.")
