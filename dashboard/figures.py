"""What every dashboard figure shares, so that each reads at a glance.

- Bytes are shown in decimal units a reader knows (kB, MB, GB), never Plotly's SI "1.001B" (a billion).
- Round and step axes tick at whole numbers; counts, bytes and losses never show negative ticks.
- Accuracy is drawn against a range that ends at 1.0 and starts at least five points below the lowest point,
  so a one-point wobble does not fill the plot, and every point keeps its marker (none is cut at the edge).
- Runs are told apart by name, and by start time (and the id's tail) where names repeat.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import plotly.graph_objects as go

from fedsim.runstore import RunInfo

LEGEND = {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"}  # above the plot, clear of the right axis
BYTE_UNITS = (("GB", 1e9), ("MB", 1e6), ("kB", 1e3))
NO_TOOLBAR = {"displayModeBar": False}
MAX_TICKS = 8


def byte_unit(largest: float) -> tuple[str, float]:
    """The unit to show bytes up to ``largest`` in: GB from a gigabyte on, MB from a megabyte, kB below."""
    for unit, size in BYTE_UNITS:
        if largest >= size:
            return unit, size
    return "kB", 1e3


def human_bytes(n: float) -> str:
    """``n`` bytes as a reader would say it: "3.4 kB", "12.3 MB", "1.21 GB"."""
    unit, size = byte_unit(n)
    value = n / size
    return f"{value:,.{2 if value < 10 else 1}f} {unit}"


def in_unit(values: Iterable[float], size: float) -> list[float]:
    return [v / size for v in values]


def shown(round_: int) -> int:
    """A simulation round as the page shows it: counted from 1, as the log ("round 10/10") counts it."""
    return round_ + 1


def integer_axis(values: Iterable[float]) -> dict[str, Any]:
    """An x axis of rounds or steps: ticks at whole numbers (1, 2, 5 x 10^k apart, at most MAX_TICKS of them)
    and half a step of room on each side, so the first and last points and bars are drawn whole."""
    points = list(values)
    lo, hi = (min(points), max(points)) if points else (0, 1)
    step = 1.0
    while (hi - lo) / step > MAX_TICKS:
        for factor in (2, 2.5, 2):  # 1 -> 2 -> 5 -> 10 -> 20 -> 50 ...
            step *= factor
            if (hi - lo) / step <= MAX_TICKS:
                break
    pad = max(0.5, (hi - lo) * 0.02)
    return {"tickmode": "linear", "tick0": 0, "dtick": step, "tickformat": "d", "range": [lo - pad, hi + pad]}


def accuracy_axis(values: Sequence[float]) -> dict[str, Any]:
    """From a round tenth at least five points below the lowest accuracy up to just above 1.0."""
    lowest = min(values) if values else 0.0
    floor = max(0.0, math.floor((lowest - 0.05) * 10) / 10)
    return {"range": [floor, 1.01], "tickformat": ".0%"}


def nonnegative(**extra: Any) -> dict[str, Any]:
    """An axis of counts, bytes or losses: it starts at zero and never shows a negative tick."""
    return {"rangemode": "tozero", **extra}


def one_axis(fig: go.Figure, x: str | None, y: str, height: int, **y_extra: Any) -> go.Figure:
    """Titles, height and the legend above the plot: the layout every dashboard figure shares. An x axis of
    rounds or steps gets whole-number ticks over the figure's points."""
    xaxis: dict[str, Any] = {"title": x}
    if x in ("round", "step"):
        xaxis |= integer_axis(v for trace in fig.data if trace.x is not None for v in trace.x)
    fig.update_layout(xaxis=xaxis, yaxis={"title": y, **y_extra}, height=height, margin={"t": 40}, legend=LEGEND)
    return fig


def two_axes(
    fig: go.Figure, x: str, y: str, y2: str, height: int, y_extra: dict[str, Any], **y2_extra: Any
) -> go.Figure:
    """:func:`one_axis` for a figure whose ``yaxis="y2"`` traces share the x axis on a right-hand scale: the left
    axis takes ``y_extra``, the right one ``y2_extra``."""
    # ticks of its own (not synced to the left axis's grid, which gives labels such as 0.332) and no second grid
    right = {"title": y2, "overlaying": "y", "side": "right", "tickmode": "auto", "showgrid": False}
    fig.update_layout(yaxis2=right | y2_extra)
    return one_axis(fig, x, y, height, **y_extra)


def run_labels(runs: Sequence[RunInfo]) -> dict[str, str]:
    """A label per run id: its name where no other run here has it, else the name and when it started (the
    time of day when those runs started on one day, else the date too), and the id's random tail where even
    that repeats (two runs in one second)."""

    def started(r: RunInfo, among: Sequence[RunInfo]) -> str:
        days = {datetime.fromtimestamp(o.started_at).date() for o in among if o.name == r.name}
        return f"{datetime.fromtimestamp(r.started_at):{'%H:%M:%S' if len(days) == 1 else '%m-%d %H:%M:%S'}}"

    labels = {r.run_id: r.name for r in runs}
    for widen in (
        lambda r: f"{r.name} · {started(r, runs)}",
        lambda r: f"{r.name} · {started(r, runs)} · {r.run_id.rsplit('-', 1)[-1]}",
        lambda r: r.run_id,
    ):
        seen: dict[str, int] = {}
        for label in labels.values():
            seen[label] = seen.get(label, 0) + 1
        repeated = [r for r in runs if seen[labels[r.run_id]] > 1]
        if not repeated:
            break
        for r in repeated:
            labels[r.run_id] = widen(r)
    return labels


def shortened(labels: dict[str, str], names: dict[str, str], width: int) -> dict[str, str]:
    """``labels`` cut to ``width`` characters in the middle of the name ("quickst…rounds10 · 06:33:59"), so
    that the name's end and what tells runs apart (the time, the id's tail) stay visible; a label is left whole
    where cutting would make two labels alike."""
    cut = {}
    for run_id, label in labels.items():
        name, rest = names.get(run_id, label), label[len(names.get(run_id, label)) :]
        room = width - len(rest) - 1
        if len(label) <= width or room < 8 or not label.startswith(name):
            cut[run_id] = label
            continue
        head = (room + 1) // 2
        cut[run_id] = f"{name[:head]}…{name[len(name) - (room - head) :]}{rest}"
    if len(set(cut.values())) < len(cut):
        return labels
    return cut
