"""What ``summary.json`` of a simulation holds."""

from __future__ import annotations

import dataclasses
import json
import math
import resource
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from fedsim.runstore import RoundRow
from fedsim.traces import Trace


@dataclass(frozen=True)
class Summary:
    """What ``summary.json`` holds. Seconds are wall-clock; ``train_s`` is time spent inside devices."""

    run_id: str
    rounds: int
    clients: int
    final_accuracy: float
    final_loss: float
    wall_s: float
    rounds_s: float
    train_s: float
    samples: int | None  # None: withheld (a DP run's clients' sample counts, their sum too)
    samples_per_s: float | None
    bytes_up: int
    bytes_down: int
    peak_rss_mb: float
    devices: int
    virtual_s: float
    bytes_moved: int
    checkpoint_s: float
    bytes_probe: int = 0  # SkewScout's traveling models, included in bytes_up/bytes_down
    local_steps: int = 0  # SGD steps each client took, when the control knob sets them
    probe_s: float = 0.0  # SkewScout's probe compute (scoring traveling models), within rounds_s
    accelerator: str = "cpu"  # where rank 0 trained: cpu, or the GPU's model
    executor: str = "sequential"
    data_stall_share: float = 0.0  # share of client seconds spent waiting for data or state, whole run
    task: str = "classification"
    final_metrics: dict[str, float] = field(default_factory=dict)  # the task's: accuracy, perplexity, mse, loss
    federated_eval: dict[str, float | int | str] = field(default_factory=dict)  # the last round's spread
    algorithm: str = ""
    dataset: str = ""
    best_accuracy: float = float("nan")  # the best test accuracy of any evaluation, NaN if never evaluated
    version: str = ""  # fedsim's
    threads: int = 0  # torch's intra-op threads on rank 0
    callback_metrics: dict[str, float] = field(default_factory=dict)  # the latest of each a callback returned
    privacy: dict[str, Any] = field(default_factory=dict)  # epsilon spent and the accountant's inputs; {}: none
    secagg: dict[str, Any] = field(default_factory=dict)  # SecAgg+'s settings, bytes, error, failed rounds
    aggregator: dict[str, Any] = field(default_factory=dict)  # a robust rule's settings and skipped rounds
    stages: list[dict[str, Any]] = field(default_factory=list)  # the round's stages in order (fedsim.sim.rounds.plan)
    attack: dict[str, Any] = field(default_factory=dict)  # the simulated attackers: settings, turns, backdoor
    bytes_up_uncompressed: int = 0  # the uplink had it gone dense: against bytes_up, what compression saved
    checkpoint: dict[str, Any] = field(default_factory=dict)  # the period in rounds, as set or as auto chose it

    def as_dict(self, skewscout: bool) -> dict[str, object]:
        """The JSON of ``summary.json``: strict JSON (a number that is not finite is ``null``), the task's
        metrics also as ``final_<name>`` (``final_mse``), accuracy ``null`` for a task without one, and
        SkewScout's fields only in a run that has SkewScout."""
        fields = asdict(self)
        for name in ("privacy", "secagg", "aggregator", "attack"):
            if not fields[name]:
                del fields[name]
        if not skewscout:
            for name in ("bytes_probe", "probe_s", "local_steps"):
                del fields[name]
        if self.final_metrics and "accuracy" not in self.final_metrics:  # regression, language model, ...
            fields["final_accuracy"] = fields["best_accuracy"] = None
        fields |= {f"final_{k}": v for k, v in self.final_metrics.items() if k not in ("loss", "accuracy")}
        return strict(fields)


def from_json(fields: dict[str, Any]) -> Summary:
    """The :class:`Summary` a summary.json holds: ``null`` numbers back to NaN, ``final_<name>`` dropped."""
    names = {f.name for f in dataclasses.fields(Summary)}
    known: dict[str, Any] = {k: float("nan") if v is None else v for k, v in fields.items() if k in names}
    return Summary(**known)


def strict(value: Any) -> Any:
    """``value`` with every float that is not finite (NaN, inf) as None: what JSON can hold."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return value


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MiB (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def accuracy_by_clock(rows: Iterable[RoundRow]) -> list[list[float]]:
    """Each evaluated round's accuracy against the trace clock at its end, as ``[clock_s, accuracy]``."""
    return [
        [float(json.loads(row.metrics_json)["clock_s"]), float(row.test_accuracy)]
        for row in rows
        if row.test_accuracy is not None
    ]


def clock_summary(curve: list[list[float]], now: float, target: float | None, trace: Trace) -> dict[str, Any]:
    """summary.json's ``clock``: its virtual seconds, the accuracy at each evaluation against it, the first time
    it reached ``target`` (``clock.target_accuracy``), and the trace that drove it."""
    reached = [t for t, accuracy in curve if target is not None and accuracy >= target]
    return {
        "kind": "trace",
        "clock_s": now,
        "accuracy_by_clock": curve,
        "target_accuracy": target,
        "time_to_target_s": reached[0] if reached else None,
        "trace": {"fingerprint": trace.fingerprint(), "clients": trace.clients, **dict(trace.meta)},
    }
