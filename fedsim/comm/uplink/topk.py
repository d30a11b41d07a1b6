"""Top-k sparsification of a client's uplink update with error feedback (Stich et al., 2018; Karimireddy et al.).

The client adds the residual it kept from earlier rounds to this round's update, sends the k entries of
largest magnitude (int32 index + float32 value each) and keeps the rest as its new residual, so nothing is
dropped for good: over rounds, what was sent plus the final residual equals what was computed.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

from pydantic import Field
from torch import Tensor

from fedsim.comm.uplink.base import Blocks, UplinkState, stacked, unstacked
from fedsim.config.compressor import CompressorConfig, register_compressor

BYTES_PER_ENTRY = 8  # int32 index + float32 value


class TopK:
    """Keep ``fraction`` of the entries (at least one); ``fraction=1`` sends everything."""

    name = "topk"
    stateful = True

    def __init__(self, fraction: float) -> None:
        self.fraction = 1.0
        self.set_knob(fraction)

    @property
    def knob(self) -> float:
        return self.fraction

    def set_knob(self, value: float) -> None:
        if not 0 < value <= 1:
            raise ValueError(f"top-k fraction must be in (0, 1], got {value}")
        self.fraction = value

    def k(self, numel: int) -> int:
        return max(1, math.ceil(self.fraction * numel))

    def compress_(self, rows: Tensor, states: list[UplinkState], seeds: list[int], round_idx: int) -> list[int]:
        corrected = rows + stacked(states, "residual", rows)
        k = self.k(rows.shape[1])
        indices = corrected.abs().topk(k, dim=1, sorted=False).indices
        rows.zero_().scatter_(1, indices, corrected.gather(1, indices))
        unstacked(states, "residual", corrected - rows)
        return [BYTES_PER_ENTRY * k] * rows.shape[0]


class TopKConfig(CompressorConfig):
    """``topk``: the ``fraction`` of entries of largest magnitude, with error feedback (Stich et al. 2018)."""

    kind: Literal["topk"] = "topk"
    fraction: float = Field(0.01, gt=0, le=1, description="share of the entries sent")
    stateful: ClassVar[bool] = True
    knob: ClassVar[str | None] = "topk"


@register_compressor(TopKConfig)
def topk(cfg: TopKConfig, blocks: Blocks) -> TopK:
    return TopK(cfg.fraction)
