"""One split step, the recipe ``fedsim split``, the regions runtime and the gRPC service all run.

:func:`split_step` decodes and validates a batch, trains the cloud's top on it and returns a typed
:class:`StepRecord`; :func:`step_row` turns one step's records (one per region) into the run-store rows, so a
batch is recorded the same way whichever runtime trained it. Metric names (``bytes_uncompressed``, ``codec``,
``client``) are spelled once, here.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fedsim.runstore import ClientRow, RoundRow
from fedsim.split.trainer import CloudTrainer, EvalResult
from fedsim.wire.batch import WireBatch, padded_bytes


@dataclass(frozen=True)
class StepRecord:
    """One batch trained by the cloud.

    ``step`` is the trainer's optimiser step after it; ``client`` the edge client's index and ``region`` the
    cloud region (the client row's device column) that trained it; ``bytes_sent`` what the message carried and
    ``bytes_uncompressed`` the same batch as fp32 padded to its longest sentence (bytes); ``start``/``end``
    unix seconds of the client's turn; ``error`` the codec's relative reconstruction error (NaN: not measured).
    """

    step: int
    client: int
    region: int
    codec: str
    loss: float
    examples: int
    bytes_sent: int
    bytes_uncompressed: int
    start: float
    end: float
    error: float = math.nan
    device: str | None = None  # the edge device's name, when it came over gRPC

    def client_row(self, run_id: str, index: int) -> ClientRow:
        return ClientRow(run_id, index, self.client, self.region, self.start, self.end, self.examples, self.loss)


def split_step(
    trainer: CloudTrainer,
    batch: WireBatch,
    client: int,
    region: int = 0,
    start: float | None = None,
    error: float = math.nan,
    device: str | None = None,
) -> StepRecord:
    """Decode, validate and train on ``batch``; :class:`~fedsim.wire.batch.BatchError` leaves the top as it was."""
    start = time.time() if start is None else start
    result = trainer.train_step(batch)
    return StepRecord(
        step=result.step,
        client=client,
        region=region,
        codec=batch.codec,
        loss=result.loss,
        examples=result.examples,
        bytes_sent=batch.nbytes,
        bytes_uncompressed=padded_bytes(batch.lengths, trainer.hidden_size),  # d-wide fp32: today's baseline
        start=start,
        end=time.time(),
        error=error,
        device=device,
    )


def step_row(
    run_id: str,
    index: int,
    records: Sequence[StepRecord],
    wall_s: float,
    evaluated: EvalResult | None = None,
    extra_bytes: int = 0,
    extra: dict[str, Any] | None = None,
) -> tuple[RoundRow, list[ClientRow]]:
    """The run-store rows of step ``index``: one round row over ``records`` and one client row each.

    ``extra_bytes`` are sent besides the activations in this step (adapter syncs, probes) and ``extra`` adds
    runtime-specific metrics (tau, sync_bytes); ``wall_s`` is seconds since the run started.
    """
    first = records[0]
    sent = sum(r.bytes_sent for r in records)
    metrics: dict[str, Any] = {
        "codec": first.codec,
        "activation_bytes": sent,
        "bytes_uncompressed": sum(r.bytes_uncompressed for r in records),
    }
    if len(records) == 1:
        metrics["client"] = first.client
        if first.device is not None:
            metrics["device"] = first.device
        if not math.isnan(first.error):
            metrics["reconstruction_error"] = first.error
    metrics.update(extra or {})
    row = RoundRow(
        run_id=run_id,
        round=index,
        train_loss=sum(r.loss for r in records) / len(records),
        test_accuracy=evaluated.accuracy if evaluated else None,
        test_loss=evaluated.loss if evaluated else None,
        bytes_up=sent + extra_bytes,
        bytes_down=0,
        wall_s=wall_s,
        train_s=max(r.end for r in records) - min(r.start for r in records),
        samples=sum(r.examples for r in records),
        clients=len(records),
        metrics_json=json.dumps(metrics),
    )
    return row, [r.client_row(run_id, index) for r in records]
