"""``fedsim runs --json`` and ``--csv``: a row per run with the columns a researcher compares runs by."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from fedsim.runstore import RunInfo, headline

COLUMNS = (
    *("run_id", "name", "kind", "status", "started", "rounds", "task", "algorithm", "stages", "metric", "final"),
    *("epsilon", "deployment_epsilon", "audit_epsilon", "delta", "uplink", "attack", "malicious_fraction"),
    *("backdoor_success", "aggregator"),
    *("bytes_up", "bytes_down", "wall_s"),
)


def _kind(algorithm: Mapping[str, Any]) -> Any:
    """The algorithm a stored config names: ``kind``, or ``name`` in a run stored before it was spelled so."""
    return algorithm.get("kind", algorithm.get("name"))


def run_row(run: RunInfo) -> dict[str, Any]:
    """One run's columns (None where the run has no such thing, or has not finished): ``stages`` names the
    round's stages in order as ``stage:kind``; ``metric`` and ``final`` are its headline (``accuracy``,
    ``perplexity``, ``mse``, ...); ``epsilon`` what a private run spent, ``deployment_epsilon`` what the
    deployment it simulates would, ``audit_epsilon`` its canaries' empirical estimate; ``uplink`` its
    compressor."""
    summary: Mapping[str, Any] = run.summary or {}
    config: Mapping[str, Any] = run.config
    task, shown = headline(summary)
    metric = shown.split(" ")[0] if shown != "-" else None
    stages = [f"{s['stage']}:{s['kind']}" for s in summary.get("stages", []) if "stage" in s and "kind" in s]
    privacy, attack = summary.get("privacy") or {}, summary.get("attack") or {}
    uplink = (config.get("uplink") or {}).get("kind")
    return {
        "run_id": run.run_id,
        "name": run.name,
        "kind": run.kind,
        "status": run.status,
        "started": datetime.fromtimestamp(run.started_at, timezone.utc).isoformat(timespec="seconds"),
        "rounds": run.rounds_done,
        "task": None if task == "-" else task,
        "algorithm": summary.get("algorithm") or _kind(config.get("algorithm") or {}),
        "stages": stages,
        "metric": metric,
        "final": _number(_final(summary, metric)),
        "epsilon": _number(privacy.get("epsilon")),
        "deployment_epsilon": _number((privacy.get("deployment") or {}).get("epsilon")),
        "audit_epsilon": _number((privacy.get("audit") or {}).get("epsilon_estimate")),
        "delta": _number(privacy.get("delta")),
        "uplink": None if uplink in (None, "none") else uplink,
        "attack": attack.get("kind"),
        "malicious_fraction": _number(attack.get("fraction")),
        "backdoor_success": _number(attack.get("backdoor_success")),
        "aggregator": (config.get("aggregator") or {}).get("kind"),
        "bytes_up": summary.get("bytes_up"),
        "bytes_down": summary.get("bytes_down"),
        "wall_s": _number(summary.get("wall_s")),
    }


def _final(summary: Mapping[str, Any], metric: str | None) -> Any:
    metrics = summary.get("final_metrics")
    if isinstance(metrics, dict) and metric in metrics:
        return metrics[metric]
    return summary.get("final_accuracy", summary.get("test_accuracy"))


def _number(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else None


def as_json(runs: Sequence[RunInfo]) -> str:
    return json.dumps([run_row(run) for run in runs], indent=2, allow_nan=False)


def as_csv(runs: Sequence[RunInfo]) -> str:
    """The same columns; ``stages`` space-separated; empty cells for None."""
    out = io.StringIO()
    writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
    writer.writeheader()
    for run in runs:
        row = run_row(run)
        writer.writerow({k: " ".join(v) if isinstance(v, list) else ("" if v is None else v) for k, v in row.items()})
    return out.getvalue()
