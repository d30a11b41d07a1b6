"""1-bit momentum with error compensation (Tang et al., 2021, "1-bit Adam"; DeepSpeed's ``OnebitAdam``).

1-bit Adam runs uncompressed for a warm-up, then freezes Adam's variance and communicates only the momentum,
each worker's compressed to one bit an entry with error compensation. In a federated round each client keeps
its own momentum of the updates it computed, ``m = beta m + (1 - beta) update``, in its state. During the first
``warmup`` rounds it sends its update dense (and warms its momentum); after, it sends ``p = m + e`` compressed
per tensor to ``(||p||_2 / sqrt(n)) sign(p)`` (DeepSpeed's scale: the compressed tensor keeps ``p``'s L2 norm)
and keeps ``e = p - that``. The server averages the momenta like updates (FedAvg's server; a server optimiser
applies to them as to any aggregate).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from torch import Tensor

from fedsim.comm.uplink.base import FLOAT32_BYTES, Blocks, UplinkState, sign_bytes, signs, stacked, unstacked
from fedsim.config.compressor import CompressorConfig, register_compressor


class OneBit:
    name = "onebit"
    stateful = True
    knob = None

    def __init__(self, blocks: Blocks, beta: float, warmup: int) -> None:
        self.blocks, self.beta, self.warmup = blocks, beta, warmup
        self.nbytes = sign_bytes(blocks)

    def set_knob(self, value: float) -> None:
        raise ValueError("uplink.kind=onebit has no knob to tune")

    def compress_(self, rows: Tensor, states: list[UplinkState], seeds: list[int], round_idx: int) -> list[int]:
        momentum = stacked(states, "momentum", rows).mul_(self.beta).add_(rows, alpha=1.0 - self.beta)
        unstacked(states, "momentum", momentum)
        if round_idx < self.warmup:  # dense: the update itself
            return [rows.shape[1] * FLOAT32_BYTES] * rows.shape[0]
        p = momentum + stacked(states, "residual", rows)
        for sl, _ in self.blocks:
            block = p[:, sl]
            scale = block.norm(dim=1, keepdim=True) / block.shape[1] ** 0.5
            rows[:, sl] = scale * signs(block)
        unstacked(states, "residual", p - rows)
        return [self.nbytes] * rows.shape[0]


class OneBitConfig(CompressorConfig):
    """``onebit``: 1-bit momentum (DeepSpeed's 1-bit Adam, Tang et al. 2021, with FedAvg's server): the client
    keeps a momentum ``m = beta m + (1 - beta) update`` of its updates; for the first ``warmup`` rounds it sends
    its update dense, then, per tensor, ``||p||_2 / sqrt(n) * sign(p)`` of ``p = m + residual`` with error
    compensation."""

    kind: Literal["onebit"] = "onebit"
    sends_momenta: ClassVar[bool] = True
    beta: float = Field(0.9, ge=0, lt=1, description="the momentum's decay")
    warmup: int = Field(5, ge=0, le=1_000_000, description="rounds sent dense before 1-bit")
    stateful: ClassVar[bool] = True


@register_compressor(OneBitConfig)
def onebit(cfg: OneBitConfig, blocks: Blocks) -> OneBit:
    return OneBit(blocks, cfg.beta, cfg.warmup)
