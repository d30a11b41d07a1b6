"""The composition table: every clock against every registered stage kind, and whether a run of that pair is
accepted or the one-line reason it is refused.

Nothing here decides anything: each cell is the settings check itself (:func:`fedsim.config.parse_config`) run
on a small run of that clock with that stage, so the table says what the declarations derive, for a kind
registered from a file as for a built-in one. ``python -m fedsim.config.composition`` prints it as markdown;
docs/reference/composition.md is that output, and a test regenerates it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fedsim.config.base import ConfigError
from fedsim.config.coreset import CoresetConfig
from fedsim.config.run import STAGES, parse_config

BASE: dict[str, Any] = {
    "name": "composition",
    "rounds": 2,
    "clients_per_round": 10,
    "format": 2,
    "data": {"dataset": "digits", "clients": 20},
    "model": {"kind": "logistic"},
}
TRACE = {"kind": "trace", "trace": {"synthetic": {"clients": 100}}}
CLOCKS: dict[str, dict[str, Any]] = {  # each clock as the sections that set it
    "measured rounds": {},
    "trace rounds": {"clock": {**TRACE, "over_select": 2}},
    "FedBuff": {
        "clients_per_round": None,
        "clock": TRACE,
        "asynchronous": {"kind": "fedbuff", "concurrency": 12, "buffer": 10},
    },
    "FedAsync": {"clients_per_round": None, "clock": TRACE, "asynchronous": {"kind": "fedasync", "concurrency": 10}},
    "gossip": {"clients_per_round": None, "algorithm": {"kind": "dpsgd", "lr": 0.1}, "topology": {"kind": "ring"}},
}
# what a kind needs beside its name to be a run of its own (a section's, then a kind's), and the sections a
# kind reads beside its own (1-bit LAMB's server reads the 1-bit uplink's momenta)
SETTINGS: dict[str, dict[str, Any]] = {
    "attack": {"fraction": 0.2},
    "privacy": {"clip": 1.0, "noise_multiplier": 1.0},
    "attack.scale": {"scale": 10.0},
    "attack.report_only": {"reported_loss": "high"},
    "attack.agr_tailored": {"against": "median"},
    "aggregator.multi_krum": {"byzantine": 1},
    "secagg.secagg_plus": {"num_shares": 3, "reconstruction_threshold": 2},
    "control.skewscout": {},
}
BESIDE: dict[str, dict[str, Any]] = {"server_optimizer.onebit_lamb": {"uplink": {"kind": "onebit"}}}


@dataclass(frozen=True)
class Cell:
    section: str
    kind: str
    clock: str
    refusal: str | None  # None: the run is accepted


def kinds() -> Iterator[tuple[str, str]]:
    """Every section's kinds but its off: the registered ones, SecAgg+, the coresets and SkewScout."""
    for section, registry in STAGES.items():
        yield from ((section, kind) for kind in registry.kinds() if kind not in ("none", registry.default))
    yield "secagg", "secagg_plus"
    coresets = CoresetConfig.model_fields["kind"].annotation.__args__  # type: ignore[union-attr]
    yield from (("coreset", kind) for kind in coresets if kind != "none")
    yield "control", "skewscout"


def cell(section: str, kind: str, clock: str) -> Cell:
    """Whether a small run of ``clock`` with ``section.kind`` is accepted, or its refusal."""
    settings = {"kind": kind, **SETTINGS.get(section, {}), **SETTINGS.get(f"{section}.{kind}", {})}
    tree = {**BASE, **CLOCKS[clock], section: settings, **BESIDE.get(f"{section}.{kind}", {})}
    try:
        parse_config(tree)
    except ConfigError as exc:
        return Cell(section, kind, clock, str(exc))
    return Cell(section, kind, clock, None)


def table() -> list[Cell]:
    return [cell(section, kind, clock) for section, kind in kinds() for clock in CLOCKS]


def markdown(cells: list[Cell]) -> str:
    """The table, a row a kind and a column a clock; each refusal once, numbered, below it."""
    reasons: dict[str, int] = {}
    rows: dict[tuple[str, str], list[str]] = {}
    for c in cells:
        if c.refusal is not None:
            reasons.setdefault(c.refusal, len(reasons) + 1)
        mark = "runs" if c.refusal is None else f"refused ({reasons[c.refusal]})"
        rows.setdefault((c.section, c.kind), []).append(mark)
    lines = [
        "| section | kind | " + " | ".join(CLOCKS) + " |",
        "| --- | --- | " + " | ".join("---" for _ in CLOCKS) + " |",
        *(f"| {section} | {kind} | " + " | ".join(marks) + " |" for (section, kind), marks in rows.items()),
        "",
        "Refusals, as the settings check prints them:",
        "",
        *(f"{n}. {reason}" for reason, n in reasons.items()),
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(table()), end="")
