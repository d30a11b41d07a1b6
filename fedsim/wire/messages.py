"""Conversions between fedsim's :class:`WireBatch` and the ``Batch`` message of ``split.proto``."""

from __future__ import annotations

import numpy as np

from fedsim.wire import split_pb2
from fedsim.wire.batch import MAX_BATCH, BatchError, WireBatch


def to_message(batch: WireBatch) -> split_pb2.Batch:
    return split_pb2.Batch(
        codec=batch.codec,
        dtype=batch.dtype,
        shape=list(batch.shape),
        payload=batch.payload,
        lengths=batch.lengths.tolist(),
        labels=batch.labels.tolist(),
    )


def from_message(message: split_pb2.Batch) -> WireBatch:
    """The batch as the trainer validates it; only what numpy cannot even hold is refused here."""
    if len(message.lengths) > MAX_BATCH:
        raise BatchError(f"batch has {len(message.lengths)} sentences; allowed 1..{MAX_BATCH}")
    if not 1 <= len(message.shape) <= 3 or any(d < 0 for d in message.shape):
        raise BatchError(f"shape {list(message.shape)} is not a tensor shape")
    return WireBatch(
        codec=message.codec,
        dtype=message.dtype,
        shape=tuple(int(d) for d in message.shape),
        payload=message.payload,
        lengths=np.asarray(message.lengths, dtype=np.int64),
        labels=np.asarray(message.labels, dtype=np.int64),
    )
