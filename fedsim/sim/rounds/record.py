"""The typed record of one federated round, and the run-store rows it becomes.

The engine fills one :class:`RoundRecord` per round (orchestration), and this module alone decides how a round
is written down (metric names included), as :mod:`fedsim.split.step` does for a split step; and what the
round's gathered client records cost (:func:`charge_records`): each device's emulated seconds, which the
runtime model learns from, and each client's messages, which the byte ledger charges.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from fedsim.comm.downlink import Downlink
from fedsim.comm.ledger import ByteLedger, MessageSizes
from fedsim.config import ConfigError
from fedsim.control.skewscout import Probe
from fedsim.runstore import ClientRow, DecisionRow, DeviceRow, RoundRow, RunStore
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.runtime.runtime_model import RuntimeModel
from fedsim.tasks.base import EvalResult
from fedsim.traces.rounds import StepLog

if TYPE_CHECKING:
    from fedsim.robust import Attack


@dataclass(frozen=True)
class StateFootprint:
    """This rank's client-state store after the round: clients held, bytes in memory and on disk."""

    clients: int
    memory_bytes: int
    disk_bytes: int


@dataclass(frozen=True)
class RoundRecord:
    """Round ``round``: its clients' records (every rank's, by device then start), each device's planned client
    count with predicted and emulated actual seconds, the cohort and how many dropped out, the bytes the ledger
    charged (up, down, and what dense float32 messages would have cost), wall and training seconds, the
    evaluation if one was due, and what its stages report (``stages``: DP's epsilon, the knob it trained with
    where the run has one, SkewScout's probe, your own stages' metrics, ...)."""

    round: int
    clients: Sequence[ClientRecord]
    planned: Sequence[int]
    predicted_s: Sequence[float]
    actual_s: Sequence[float]
    cohort: int
    dropped: int
    bytes_up: int
    bytes_down: int
    bytes_uncompressed: int
    bytes_up_uncompressed: int  # the uplink alone, dense: against ``bytes_up`` it shows what compression saved
    wall_s: float
    train_s: float
    evaluated: EvalResult | None
    federated: dict[str, float | int | str] | None
    state: StateFootprint
    lr: float  # the clients' learning rate this round, the schedule applied
    stages: Mapping[str, object] | None = None  # DP's epsilon and clip, SecAgg+'s bytes, the attackers, ...
    clock: tuple[float, float] | None = None  # on the trace clock: the round's start and end (virtual seconds)
    private: str | None = None  # under DP: "withheld" (the clients' statistics are not stored) or "diagnostics"

    @property
    def samples(self) -> int:
        return sum(rec.samples for rec in self.clients)

    def stall_share(self, devices: int) -> list[float]:
        """Per device, the share of its busy seconds spent waiting for client data or state (DS-Analyzer's
        data stall); 0 for a device that trained nobody."""
        waited, busy = [0.0] * devices, [0.0] * devices
        for rec in self.clients:
            waited[rec.device] += rec.wait_s
            busy[rec.device] += rec.seconds
        return [w / b if b > 0 else 0.0 for w, b in zip(waited, busy, strict=True)]

    @property
    def virtual_s(self) -> float:
        """The round's virtual time: on the trace clock, from its start to its end; else its slowest device's
        emulated seconds."""
        return self.clock[1] - self.clock[0] if self.clock else max(self.actual_s, default=0.0)

    def add_to(self, totals: dict[str, float], round_s: float) -> None:
        """Add this round to a run's running sums (``round_s``: its seconds, evaluation left out)."""
        totals["train_s"] += self.train_s
        totals["client_s"] += sum(rec.seconds for rec in self.clients)
        totals["wait_s"] += sum(rec.wait_s for rec in self.clients)
        totals["samples"] += 0 if self.private == "withheld" else self.samples  # under DP: not even their sum
        totals["virtual_s"] += self.virtual_s
        totals["rounds_s"] += round_s
        totals["bytes_up_uncompressed"] += self.bytes_up_uncompressed

    def round_row(self, run_id: str) -> RoundRow:
        metrics: dict[str, object] = {
            "virtual_s": self.virtual_s,
            "dropped": self.dropped,
            "cohort": self.cohort,
            "lr": self.lr,
            "bytes_uncompressed": self.bytes_uncompressed,
            "bytes_up_uncompressed": self.bytes_up_uncompressed,
            # this rank's client-state store (rank 0's when the run spans several ranks)
            "state_clients": self.state.clients,
            "state_memory_bytes": self.state.memory_bytes,
            "state_disk_bytes": self.state.disk_bytes,
            "stall_share": [round(s, 4) for s in self.stall_share(len(self.planned))],
        }
        if self.stages:
            metrics |= self.stages
        if self.federated and self.private != "withheld":  # the metric's spread on the clients' held-out data
            metrics["fed_eval"] = self.federated
        if self.evaluated is not None:  # the task's own metrics (perplexity, mse) beside accuracy and loss
            metrics |= {f"test_{name}": value for name, value in self.evaluated.metrics().items()}
        if self.private == "diagnostics":  # the clients' un-noised statistics below, which DP does not cover
            metrics["dp_diagnostics"] = True
        withheld = self.private == "withheld"
        return RoundRow(
            run_id=run_id,
            round=self.round,
            train_loss=None if withheld else sum(rec.loss for rec in self.clients) / max(len(self.clients), 1),
            test_accuracy=_finite(self.evaluated.accuracy) if self.evaluated else None,
            test_loss=self.evaluated.loss if self.evaluated else None,
            bytes_up=self.bytes_up,
            bytes_down=self.bytes_down,
            wall_s=self.wall_s,
            train_s=self.train_s,
            samples=None if withheld else self.samples,
            clients=len(self.clients),
            metrics_json=json.dumps(metrics),
        )

    def write(self, store: RunStore, run_id: str, probe: Probe | None = None, knob_name: str = "") -> RoundRow:
        """The round's rows, in one transaction, and SkewScout's decision on ``knob_name`` if it probed
        (``probe``); returns the round row."""
        row = self.round_row(run_id)
        withheld = self.private == "withheld"  # under DP, who trained when stays; what their data said does not
        clients = [
            ClientRow(
                run_id,
                self.round,
                c.cid,
                c.device,
                c.start,
                c.end,
                None if withheld else c.samples,
                None if withheld else c.loss,
            )
            for c in self.clients
        ]
        devices = [
            DeviceRow(run_id, self.round, d, n, self.predicted_s[d], self.actual_s[d])
            for d, n in enumerate(self.planned)
        ]
        store.log_round(run_id, row, clients, devices)
        if probe is not None:
            d = probe.decision
            gaps = json.dumps([[i, j, round(g, 3)] for i, j, g in probe.gaps])
            store.log_decision(
                DecisionRow(run_id, self.round, knob_name, d.estimate, d.old, d.new, d.action, probe.bytes, gaps)
            )
        return row


def knob_metrics(knob: float | None, probe: Probe | None, probing: bool) -> dict[str, float]:
    """A round's knob where the run has one (``control.knob``), and what SkewScout's probes cost where it runs
    (``probing``; 0 in a round without a probe)."""
    metrics = {"knob": float(knob)} if knob is not None else {}
    if probing:
        metrics |= {"probe_bytes": float(probe.bytes if probe else 0), "probe_s": probe.seconds if probe else 0.0}
    return metrics


def _finite(value: float) -> float | None:
    """``None`` for a metric the task does not have (NaN accuracy of a regression)."""
    return None if math.isnan(value) else value


def checked_metrics(row: RoundRow, metrics: Mapping[str, object]) -> dict[str, float]:
    """A callback's ``metrics`` for round ``row``, checked: each name new to the row (1-64 characters), each
    value a finite number; anything else is one ConfigError naming the metric."""
    taken = {f.name for f in fields(RoundRow)} | set(json.loads(row.metrics_json))
    checked: dict[str, float] = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not 0 < len(name) <= 64:
            raise ConfigError(f"callback metric {str(name)[:64]!r}: a name is 1-64 characters")
        if name in taken:
            raise ConfigError(f"callback metric {name!r}: the round already records a metric of that name")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"callback metric {name!r}: {str(value)[:64]} is not a finite number")
        checked[name] = float(value)
    return checked


def record_callback_metrics(
    row: RoundRow, metrics: Mapping[str, object], latest: dict[str, float], runstore: RunStore | None, run_id: str
) -> None:
    """Add ``metrics`` (what a callback returned after round ``row.round``), checked (:func:`checked_metrics`), to
    that round's row in ``runstore`` (rank 0's; None elsewhere) and, latest value by name, to ``latest``
    (summary.json's ``callback_metrics``)."""
    checked = checked_metrics(row, metrics)
    latest.update(checked)
    if checked:  # the row a tracker logs next holds them too
        row.metrics_json = json.dumps({**json.loads(row.metrics_json), **checked})
    if runstore is not None and checked:
        runstore.add_round_metrics(run_id, row.round, checked)


def as_reported(records: Sequence[ClientRecord], attack: Attack | None, r: int) -> list[ClientRecord]:
    """The round's gathered ``records`` with each client's loss as it reported it: a malicious client's as
    ``attack.reported_loss`` says, where the attack lies (every rank computes the same from the same records)."""
    if attack is None or not attack.cfg.lies_about_loss:
        return list(records)
    said = attack.reported([rec.cid for rec in records], [rec.loss for rec in records], r)
    return [replace(rec, loss=loss) for rec, loss in zip(records, said, strict=True)]


# ---------------------------------------------------------------- what the round's client records cost
def charge_records(
    records: Sequence[ClientRecord],
    slowdown: Sequence[float],
    runtime: RuntimeModel,
    ledger: ByteLedger,
    sizes: MessageSizes,
    downlink: Downlink | None,
    counted: bool = False,
) -> list[float]:
    """Each device's emulated seconds this round (its clients' measured seconds times its ``slowdown``), each
    observed by ``runtime`` against the client's size (``counted``: as one client, where DP withholds its
    sample count); each client's download and upload charged to ``ledger`` at their wire sizes (a compressed
    update's or broadcast's own bytes where they went compressed)."""
    actual = [0.0] * len(slowdown)
    for rec in records:
        seconds = rec.seconds * slowdown[rec.device]
        actual[rec.device] += seconds
        runtime.observe(rec.device, 1 if counted else rec.size, seconds)
        model = None if downlink is None else downlink.model_bytes(rec.cid, sizes.model)
        ledger.charge_client(sizes, rec.delta_bytes, model)
    return actual


def clock_metrics(log: StepLog, in_flight: int) -> dict[str, object]:
    """A round's or server step's metrics on the trace clock, its event log: the clock at its end, the tasks
    in flight then, the staleness of what it applied, each arrival (client, staleness, time, weight) and drop
    (client, time); where a selector chose, the clients it chose that were not started (offline, busy, or
    beyond the round's places)."""
    staleness = [s for _, s, _, _ in log.applied]
    metrics: dict[str, object] = {
        "clock_s": log.clock_to,
        "in_flight": in_flight,
        "staleness_mean": sum(staleness) / len(staleness) if staleness else None,
        "staleness_max": max(staleness, default=0),
        "applied": [[cid, s, round(t, 6), round(w, 6)] for cid, s, t, w in log.applied],
        "dropped_clients": [[cid, round(t, 6)] for cid, t in log.dropped],
    }
    return metrics | ({"not_started": log.not_started} if log.not_started is not None else {})
