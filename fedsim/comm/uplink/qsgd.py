"""QSGD (Alistarh et al., 2017, "QSGD: Communication-Efficient SGD via Gradient Quantization and Encoding").

The flat update is cut into buckets of ``bucket`` entries (the paper's bucketing; the last one shorter). Each
bucket ``v`` is sent as its L2 norm and, per entry, a sign and a level ``l`` in ``0..s``: with ``a = |v_i| s /
||v||``, ``l = floor(a) + 1`` with probability ``a - floor(a)``, else ``floor(a)``; the server reads ``||v||
sign(v_i) l / s``, an unbiased estimate of ``v_i``. Fixed-width, an entry costs ``1 + ceil(log2(s + 1))`` bits;
with ``elias`` it costs the Elias-gamma code of ``l + 1`` plus a sign bit where ``l > 0`` (small levels, which
dominate at small ``s``, cost one bit). Stateless: QSGD keeps no memory between rounds.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.comm.uplink.base import FLOAT32_BYTES, Blocks, UplinkState, client_generator
from fedsim.config.compressor import CompressorConfig, register_compressor


class QSGD:
    name = "qsgd"
    stateful = False

    def __init__(self, levels: int, bucket: int, elias: bool) -> None:
        self.levels, self.bucket, self.elias = levels, bucket, elias

    @property
    def knob(self) -> float:
        return float(self.levels)

    def set_knob(self, value: float) -> None:
        self.levels = int(value)

    def quantize(self, rows: Tensor, uniforms: Tensor) -> tuple[Tensor, Tensor]:
        """``(decoded rows, levels)`` of ``rows`` (K, d) given one uniform draw in [0, 1) per entry."""
        k, d = rows.shape
        buckets = math.ceil(d / self.bucket)
        padded = torch.zeros(k, buckets * self.bucket, dtype=rows.dtype, device=rows.device)
        padded[:, :d] = rows
        v = padded.view(k, buckets, self.bucket)
        norm = v.norm(dim=2, keepdim=True)
        a = v.abs() / torch.where(norm > 0, norm, 1.0) * self.levels
        floor = a.floor()
        level = floor + (uniforms.view(k, buckets, self.bucket) < a - floor).to(a.dtype)
        decoded = norm * torch.sign(v) * level / self.levels
        return decoded.view(k, -1)[:, :d], level.view(k, -1)[:, :d]

    def compress_(self, rows: Tensor, states: list[UplinkState], seeds: list[int], round_idx: int) -> list[int]:
        uniforms = torch.empty(rows.shape[0], math.ceil(rows.shape[1] / self.bucket) * self.bucket, device=rows.device)
        for row, seed in zip(uniforms, seeds, strict=True):
            row.uniform_(generator=client_generator(seed, rows.device))
        decoded, levels = self.quantize(rows, uniforms)
        rows.copy_(decoded)
        return self.message_bytes(levels)

    def message_bytes(self, levels: Tensor) -> list[int]:
        """Each row's message: a float32 norm per bucket, then each entry's sign and level."""
        d = levels.shape[1]
        header = math.ceil(d / self.bucket) * FLOAT32_BYTES * 8
        if not self.elias:
            fixed = header + d * (1 + math.ceil(math.log2(self.levels + 1)))
            return [math.ceil(fixed / 8)] * levels.shape[0]
        _, exponent = torch.frexp(levels + 1)  # l + 1 = m 2^e with m in [0.5, 1): floor(log2(l + 1)) = e - 1
        gamma = 2 * (exponent.to(torch.int64) - 1) + 1
        bits = gamma.sum(dim=1) + (levels > 0).sum(dim=1) + header
        return [math.ceil(b / 8) for b in bits.tolist()]  # data-dependent: one host read per call


class QSGDConfig(CompressorConfig):
    """``qsgd`` (Alistarh et al. 2017): each ``bucket`` of entries is sent as its L2 norm and, per entry, a sign
    and a level in 0..``levels`` rounded stochastically (unbiased); ``elias`` charges the levels' Elias-gamma
    code instead of fixed-width bits."""

    kind: Literal["qsgd"] = "qsgd"
    knob: ClassVar[str | None] = "levels"
    levels: int = Field(16, ge=1, le=65535, description="quantization levels s")
    bucket: int = Field(512, ge=1, le=1 << 24, description="entries sharing one norm")
    elias: bool = Field(False, description="charge Elias-gamma coded levels")


@register_compressor(QSGDConfig)
def qsgd(cfg: QSGDConfig, blocks: Blocks) -> QSGD:
    return QSGD(cfg.levels, cfg.bucket, cfg.elias)
