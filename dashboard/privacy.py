"""A simulation's privacy panels: the privacy budget spent round by round beside accuracy (DP), and what secure
aggregation (SecAgg+) cost each client and how far its quantization moved the sum."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import streamlit as st

from dashboard.data import LiveRun
from dashboard.figures import accuracy_axis, byte_unit, human_bytes, in_unit, nonnegative, shown, two_axes


def budget_figure(live: LiveRun) -> go.Figure | None:
    """Epsilon spent after each round (right) beside test accuracy (left); None for a run without DP."""
    spent = [(shown(r.round), m["epsilon"]) for r, m in zip(live.rounds, live.metrics, strict=True) if "epsilon" in m]
    if not spent or all(e is None for _, e in spent):
        return None
    fig = go.Figure()
    scored = [(shown(r.round), r.test_accuracy) for r in live.rounds if r.test_accuracy is not None]
    fig.add_scatter(x=[s[0] for s in scored], y=[s[1] for s in scored], name="test accuracy", mode="lines+markers")
    fig.add_scatter(x=[s[0] for s in spent], y=[s[1] for s in spent], name="epsilon spent", yaxis="y2")
    accuracies = [float(s[1] or 0.0) for s in scored]
    return two_axes(fig, "round", "test accuracy", "epsilon spent", 320, accuracy_axis(accuracies), **nonnegative())


def _end(value: float | None) -> str:
    return "unbounded" if value is None else f"{value:.3f}"


def differential_privacy(live: LiveRun) -> None:
    """The DP panel: epsilon spent (the run's, and the simulated deployment's when there is one) and its delta,
    the clip, the canaries' empirical estimate beside the accountant's bound once the run has finished, and the
    budget curve."""
    last = next((m for m in reversed(live.metrics) if "epsilon" in m), None)
    if last is None:
        return
    info = live.info
    config: dict[str, Any] = (info.config.get("privacy") or {}) if info is not None else {}
    summary: dict[str, Any] = ((info.summary or {}).get("privacy") or {}) if info is not None else {}
    st.subheader("Differential privacy")
    a, b, c = st.columns(3)
    epsilon = last["epsilon"]
    a.metric("epsilon spent", "unbounded" if epsilon is None else f"{epsilon:.3f}")
    b.metric("delta", f"{config.get('delta', 0):.0e}")
    c.metric("clip", f"{last.get('clip', 0):.4g}")
    deployed, audited = "deployment_epsilon" in last, config.get("audit") is not None
    if deployed or audited:
        d, e = st.columns(2)
        if deployed:
            spent = last["deployment_epsilon"]
            d.metric("deployment's epsilon", "unbounded" if spent is None else f"{spent:.3f}")
        if audited:
            audit = summary.get("audit") or {}
            estimate, interval = audit.get("epsilon_estimate"), audit.get("epsilon_interval")
            shown_estimate = "after the run" if estimate is None else f"{estimate:.3f}"
            e.metric("empirical epsilon (canaries)", shown_estimate)
            if interval is not None:
                e.caption(
                    f"equal-variance estimate {audit['epsilon_estimate_equal_variance']:.3f},"
                    f" 95% interval {_end(interval[0])} to {_end(interval[1])}"
                    + (f"; {audit['note']}" if "note" in audit else "")
                )
    figure = budget_figure(live)
    if figure is not None:
        st.plotly_chart(figure, width="stretch")
    else:
        st.caption("No noise: clipping only, epsilon is unbounded.")
    if last.get("dp_diagnostics"):
        st.caption(
            "privacy.diagnostics: the training loss, sample counts and federated evaluation shown for this run are"
            " the clients' un-noised statistics, outside what epsilon covers."
        )
    else:
        st.caption("The clients' training loss and sample counts are withheld: epsilon covers the model only.")


def secure_aggregation(live: LiveRun) -> None:
    """The SecAgg+ panel: bytes per client per round (the masked vector, keys and shares) and the quantization
    error of each unmasked sum; failed rounds counted."""
    rounds = [(r, m) for r, m in zip(live.rounds, live.metrics, strict=True) if "secagg_up_bytes" in m]
    if not rounds:
        return
    st.subheader("Secure aggregation (SecAgg+)")
    up = [float(m["secagg_up_bytes"]) for _, m in rounds]
    down = [float(m["secagg_down_bytes"]) for _, m in rounds]
    errors = [m.get("secagg_quantization_error") for _, m in rounds]
    failed = sum(1 for _, m in rounds if m.get("secagg_failed"))
    measured = [e for e in errors if e is not None]
    a, b, c = st.columns(3)
    a.metric("SecAgg+ bytes up per client", human_bytes(up[-1]))
    withheld = not measured and any(not m.get("secagg_failed") for _, m in rounds)  # DP: measured on the raw sum
    b.metric("quantization error", f"{measured[-1]:.2e}" if measured else "withheld" if withheld else "-")
    c.metric("failed rounds", f"{failed:,}")
    x = [shown(r.round) for r, _ in rounds]
    unit, size = byte_unit(max(u + d for u, d in zip(up, down, strict=True)))
    fig = go.Figure()
    fig.add_bar(x=x, y=in_unit(up, size), name="up per client")
    fig.add_bar(x=x, y=in_unit(down, size), name="down per client")
    fig.add_scatter(x=x, y=errors, name="quantization error", yaxis="y2", mode="lines+markers")
    fig.update_layout(barmode="stack")
    error_axis = nonnegative(tickformat=".1e")  # errors of 1e-6 and less: no SI suffixes such as "5µ"
    two_axes(fig, "round", f"{unit} per client", "relative quantization error", 300, nonnegative(), **error_axis)
    st.plotly_chart(fig, width="stretch")
