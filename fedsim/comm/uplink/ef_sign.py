"""EF-SignSGD (Karimireddy et al., 2019, "Error Feedback Fixes SignSGD and other Gradient Compression Schemes").

Each client adds the residual it kept to its update, ``p = update + e``, sends ``C(p) = (||p||_1 / n) sign(p)``
per model tensor of ``n`` entries (one bit an entry and one float32 scale) and keeps ``e = p - C(p)``. The
scaled sign is the paper's compressor applied layer by layer, as its experiments do; over rounds nothing is
lost, only delayed.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from torch import Tensor

from fedsim.comm.uplink.base import Blocks, UplinkState, sign_bytes, signs, stacked, unstacked
from fedsim.config.compressor import CompressorConfig, register_compressor


class EFSign:
    name = "ef_sign"
    stateful = True
    knob = None

    def __init__(self, blocks: Blocks) -> None:
        self.blocks = blocks
        self.nbytes = sign_bytes(blocks)

    def set_knob(self, value: float) -> None:
        raise ValueError("uplink.kind=ef_sign has no knob to tune")

    def compress_(self, rows: Tensor, states: list[UplinkState], seeds: list[int], round_idx: int) -> list[int]:
        p = rows + stacked(states, "residual", rows)
        for sl, _ in self.blocks:
            block = p[:, sl]
            rows[:, sl] = block.abs().mean(dim=1, keepdim=True) * signs(block)
        unstacked(states, "residual", p - rows)
        return [self.nbytes] * rows.shape[0]


class EFSignConfig(CompressorConfig):
    """``ef_sign``: EF-SignSGD (Karimireddy et al. 2019): ``p = update + residual``; per tensor, ``mean|p| *
    sign(p)`` is sent (1 bit an entry and one float32 scale) and ``p`` minus it stays as the residual."""

    kind: Literal["ef_sign"] = "ef_sign"
    stateful: ClassVar[bool] = True


@register_compressor(EFSignConfig)
def ef_sign(cfg: EFSignConfig, blocks: Blocks) -> EFSign:
    return EFSign(blocks)
