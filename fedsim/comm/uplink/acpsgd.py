"""ACP-SGD, alternate compressed PowerSGD (Zhang, Shi, Wang & Li, "Evaluation and Optimization of Gradient
Compression for Distributed Deep Learning", ICDCS 2023), on each client's uplink.

PowerSGD sends both factors of ``M ~ P Q^T`` every step; ACP-SGD sends one, alternately, and reuses the other
from the step before. Per model tensor viewed as an ``(n, m)`` matrix ``M`` with the residual ``e`` added
(error feedback): on a P-turn, ``P = M orth(Q)`` with the ``Q`` of the client's last turn, ``P`` is sent and
the server reads ``P orth(Q)^T``; on a Q-turn, ``Q = M^T orth(P)`` with the last ``P``, ``Q`` is sent and the
server reads ``orth(P) Q^T``. ``e`` is what the read missed. A client alternates by its own turns (its first
sends ``P`` from a ``Q`` drawn from its own stream, which the server can draw too); the server keeps each
client's last factor, as every worker of the paper's all-reduce does, so a message is ``n r`` or ``m r``
float32, half of PowerSGD's. Tensors that would not gain stay dense, as PowerSGD decides. The factors and the
residual are client state.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.comm.uplink.base import FLOAT32_BYTES, Blocks, UplinkState, client_generator, stacked, unstacked
from fedsim.comm.uplink.powersgd import PowerSGD, orthogonalize_
from fedsim.config.compressor import CompressorConfig, register_compressor


class ACPSGD(PowerSGD):
    """PowerSGD's rank, knob and choice of matrices; one factor a turn."""

    name = "acpsgd"
    stateful = True

    def __init__(self, blocks: Blocks, rank: int, min_compression: float) -> None:
        super().__init__(blocks, rank, min_compression, warm_start=True)

    def turn_bytes(self, compressed: list[tuple[slice, int, int, int]], sends_p: bool) -> int:
        """One client's message on a P-turn (``P`` of each compressed matrix) or a Q-turn, the rest dense."""
        factors = sum((n if sends_p else m) * r for _, n, m, r in compressed)
        dense = self.blocks.numel - sum(n * m for _, n, m, _ in compressed)
        return (factors + dense) * FLOAT32_BYTES

    def compress_(self, rows: Tensor, states: list[UplinkState], seeds: list[int], round_idx: int) -> list[int]:
        compressed = self.matrices()
        p_numel, q_numel = sum(n * r for _, n, _, r in compressed), sum(m * r for _, _, m, r in compressed)
        p_all = rows + stacked(states, "residual", rows)  # what the client owes: update plus the error kept
        rows.copy_(p_all)  # dense tensors go as they are: no error for them
        sent: list[int] = []
        for k, (state, seed) in enumerate(zip(states, seeds, strict=True)):
            last_p = state.get("p")
            sends_p = last_p is None or last_p.numel() != p_numel  # its first turn, a P-turn, or a new rank
            fixed = state.get("q") if sends_p else last_p
            if fixed is None or fixed.numel() != (q_numel if sends_p else p_numel):
                fixed = torch.empty(q_numel, device=rows.device).normal_(generator=client_generator(seed, rows.device))
            fixed = fixed.to(rows.device)
            new = torch.empty(p_numel if sends_p else q_numel, device=rows.device, dtype=rows.dtype)
            fixed_at = new_at = 0
            for sl, n, m, r in compressed:
                matrix = p_all[k, sl].view(n, m)
                a, b = (n, m) if sends_p else (m, n)  # the sent factor's rows, the fixed one's
                other = orthogonalize_(fixed[fixed_at : fixed_at + b * r].reshape(1, b, r).clone(), self.epsilon)[0]
                factor = matrix @ other if sends_p else matrix.T @ other
                rows[k, sl] = (factor @ other.T if sends_p else other @ factor.T).reshape(-1)
                new[new_at : new_at + a * r] = factor.reshape(-1)
                fixed_at, new_at = fixed_at + b * r, new_at + a * r
            if sends_p:
                state.pop("q", None)
                state["p"] = new
            else:
                state.pop("p", None)
                state["q"] = new
            sent.append(self.turn_bytes(compressed, sends_p))
        unstacked(states, "residual", p_all - rows)
        return sent


class ACPSGDConfig(CompressorConfig):
    """``acpsgd`` (Zhang et al., ICDCS 2023): PowerSGD's ``P Q^T`` of ``rank``, sending ``P`` and ``Q`` on
    alternate turns of a client and reusing the other factor, with error feedback; a tensor is compressed only
    where ``(n + m) rank * min_compression < n m``, as PowerSGD decides."""

    kind: Literal["acpsgd"] = "acpsgd"
    rank: int = Field(4, ge=1, le=4096, description="rank of each matrix's approximation")
    min_compression: float = Field(2.0, ge=1, le=1e6, description="least compression to compress a tensor")
    stateful: ClassVar[bool] = True


@register_compressor(ACPSGDConfig)
def acpsgd(cfg: ACPSGDConfig, blocks: Blocks) -> ACPSGD:
    return ACPSGD(blocks, cfg.rank, cfg.min_compression)
