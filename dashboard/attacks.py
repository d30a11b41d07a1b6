"""A simulation's attack panel: which clients attacked each round, and a backdoor's success beside accuracy."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import streamlit as st

from dashboard.data import LiveRun
from dashboard.escape import markdown_literal
from dashboard.figures import accuracy_axis, nonnegative, shown, two_axes


def named(section: dict[str, Any]) -> str:
    """A stage by its kind, and where your own is registered."""
    kind = str(section.get("kind", "?"))
    return f"{kind} ({section['factory']})" if section.get("factory") else kind


def matchup(attack: dict[str, Any], aggregator: dict[str, Any]) -> str:
    """Which attack, by how many, against which aggregation rule."""
    share = float(attack.get("fraction", 0.0))
    plain = aggregator.get("kind", "none") in ("none", "mean")  # no robust rule ("mean" in older runs' configs)
    return f"attack: {named(attack)}, {share:.0%} of clients; aggregator: {'mean' if plain else named(aggregator)}"


def attacks(live: LiveRun) -> None:
    """Attackers per round (bars) with test accuracy, and the backdoor success curve when there is one."""
    rounds = [(r, m) for r, m in zip(live.rounds, live.metrics, strict=True) if "attackers" in m]
    if not rounds:
        return
    st.subheader("Attacks")
    config = live.info.config if live.info is not None else {}
    st.caption(markdown_literal(matchup(config.get("attack") or {}, config.get("aggregator") or {})))
    x = [shown(r.round) for r, _ in rounds]
    counts = [len(m["attackers"]) for _, m in rounds]
    success = [(shown(r.round), m["backdoor_success"]) for r, m in rounds if m.get("backdoor_success") is not None]
    a, b, c = st.columns(3)
    a.metric("attackers this round", f"{counts[-1]:,}")
    b.metric("attacker turns", f"{sum(counts):,}")
    c.metric("backdoor success", f"{success[-1][1]:.1%}" if success else "-")
    fig = go.Figure()
    fig.add_bar(x=x, y=counts, name="attackers")
    if success:
        fig.add_scatter(x=[s[0] for s in success], y=[s[1] for s in success], name="backdoor success", yaxis="y2")
    scored = [(shown(r.round), r.test_accuracy) for r, _ in rounds if r.test_accuracy is not None]
    if scored:
        fig.add_scatter(x=[s[0] for s in scored], y=[s[1] for s in scored], name="test accuracy", yaxis="y2")
    right = accuracy_axis([float(s[1] or 0) for s in (*success, *scored)] or [0.0])
    two_axes(fig, "round", "attackers", "share of test inputs", 300, nonnegative(tickformat="d"), **right)
    st.plotly_chart(fig, width="stretch")
    latest = ", ".join(str(c) for c in rounds[-1][1]["attackers"]) or "none"
    st.caption(markdown_literal(f"attacking clients in round {x[-1]}: {latest}"))
