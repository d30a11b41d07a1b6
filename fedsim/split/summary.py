"""The typed summary every split runtime writes to ``summary.json`` and the run store.

One class for ``fedsim split``, the regions runtime and ``fedsim serve``; the fields a runtime does not have
stay None and are left out of the JSON, so each summary.json keeps the keys it always had.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class SplitSummary:
    """Bytes are on the wire (``bytes_up``) or as fp32 padded to each batch's longest sentence
    (``bytes_uncompressed``); seconds are wall-clock; ``test_accuracy`` is on the test set through the codec, as
    deployment sees it, ``test_accuracy_uncompressed`` the same adapters on the bottom's fp32 activations."""

    run_id: str
    steps: int
    bytes_up: int
    wall_s: float
    adapters: str
    codec: str | None = None
    adapter: str | None = None
    test_accuracy: float | None = None
    test_loss: float | None = None
    bytes_uncompressed: int | None = None
    compression_ratio: float | None = None  # against fp32 padded to each batch's longest sentence
    compression_ratio_unpadded: float | None = None  # against fp32 of the real tokens only
    test_accuracy_uncompressed: float | None = None  # the same adapters on fp32 activations (no codec)
    reconstruction_error: float | None = None
    peak_activation_mb: float | None = None
    trainable_params: int | None = None
    # several cloud regions
    regions: int | None = None
    sync_bytes: int | None = None
    probe_bytes: int | None = None
    tau_first: int | None = None
    tau_last: int | None = None
    tau_mean: float | None = None
    # the gRPC service
    examples: int | None = None
    rejected: int | None = None
    devices: dict[str, dict[str, Any]] | None = None
    membership: dict[str, int] | None = None  # joins, leaves, lost, takeovers; active and standby at the end

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def write(self, out: Path) -> None:
        """``out/summary.json``, swapped in whole by rename."""
        tmp = out / ".summary.json.tmp"
        tmp.write_text(json.dumps(self.as_dict(), indent=2) + "\n")
        tmp.replace(out / "summary.json")
