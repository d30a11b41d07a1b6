"""What a round's gathered client records cost: each device's emulated seconds, which the runtime model learns
from, and each client's messages, which the byte ledger charges."""

from __future__ import annotations

from collections.abc import Sequence

from fedsim.comm.downlink import Downlink
from fedsim.comm.ledger import ByteLedger, MessageSizes
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.runtime.runtime_model import RuntimeModel


def charge_records(
    records: Sequence[ClientRecord],
    slowdown: Sequence[float],
    runtime: RuntimeModel,
    ledger: ByteLedger,
    sizes: MessageSizes,
    downlink: Downlink | None,
) -> list[float]:
    """Each device's emulated seconds this round (its clients' measured seconds times its ``slowdown``), each
    observed by ``runtime``; each client's download and upload charged to ``ledger`` at their wire sizes (a
    compressed update's or broadcast's own bytes where they went compressed)."""
    actual = [0.0] * len(slowdown)
    for rec in records:
        seconds = rec.seconds * slowdown[rec.device]
        actual[rec.device] += seconds
        runtime.observe(rec.device, rec.size, seconds)
        model = None if downlink is None else downlink.model_bytes(rec.cid, sizes.model)
        ledger.charge_client(sizes, rec.delta_bytes, model)
    return actual
