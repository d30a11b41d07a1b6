"""PowerSGD (Vogels et al., 2019) on each client's uplink, with the arithmetic of torch's PowerSGD hook.

Per model tensor viewed as an ``(n, m)`` matrix ``M`` (``shape[0]`` rows; vectors and matrices too small to
gain stay dense: compressed only where ``(n + m) r * min_compression < n m``, torch's ``_should_compress``),
with the residual ``e`` added (error feedback): orthogonalise ``Q`` (the client's last round's ``Q`` when warm
starting, else standard normal draws), ``P = M Q``, orthogonalise ``P``, ``Q = M^T P`` (``iterations`` times,
``Q`` orthogonalised again before each repeat); the client sends ``P`` and ``Q`` (``(n + m) r`` float32, or
float16 with ``half``, rounded before the server reads them) and the server reads ``P Q^T``. ``e`` is what that
missed, rounding included. The K clients of a fused group run as one batch of matrix products. Both the
residual and ``Q`` are client state.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.comm.uplink.base import FLOAT32_BYTES, Blocks, UplinkState, client_generator, stacked, unstacked
from fedsim.config.compressor import CompressorConfig, register_compressor


def orthogonalize_(matrices: Tensor, epsilon: float = 0.0) -> Tensor:
    """Orthonormal columns for a batch ``(B, n, r)``, in place: Gram-Schmidt up to rank 2, QR above, as the
    hook's ``_orthogonalize`` does (so both give the same numbers)."""
    rank = matrices.shape[2]
    if rank > 2:
        q, _ = torch.linalg.qr(matrices)
        return matrices.copy_(q)
    for i in range(rank):
        col = matrices[:, :, i : i + 1]
        col /= torch.linalg.vector_norm(col, dim=1, keepdim=True) + epsilon
        if i + 1 < rank:
            rest = matrices[:, :, i + 1 :]
            rest -= torch.sum(col * rest, dim=1, keepdim=True) * col
    return matrices


def should_compress(n: int, m: int, rank: int, min_compression: float) -> bool:
    return (n + m) * rank * min_compression < n * m


class PowerSGD:
    name = "powersgd"
    stateful = True

    def __init__(
        self,
        blocks: Blocks,
        rank: int,
        min_compression: float,
        warm_start: bool,
        iterations: int = 1,
        half: bool = False,
    ) -> None:
        self.blocks, self.rank, self.min_compression, self.warm_start = blocks, rank, min_compression, warm_start
        self.iterations, self.half = iterations, half
        self.epsilon = 1e-8  # a column of zeros (an update that did not move a layer) stays finite

    @property
    def knob(self) -> float:
        return float(self.rank)

    def set_knob(self, value: float) -> None:
        self.rank = int(value)

    def matrices(self) -> list[tuple[slice, int, int, int]]:
        """``(slice, n, m, r)`` of each tensor compressed at the current rank; the rest go dense."""
        out = []
        for sl, shape in self.blocks:
            if len(shape) < 2:
                continue
            n = shape[0]
            m = (sl.stop - sl.start) // n
            r = min(n, m, self.rank)
            if should_compress(n, m, r, self.min_compression):
                out.append((sl, n, m, r))
        return out

    def message_bytes(self, compressed: list[tuple[slice, int, int, int]] | None = None) -> int:
        """One client's message: ``P`` and ``Q`` of each compressed matrix (``compressed``, by default those of
        the current rank), every other tensor dense."""
        compressed = self.matrices() if compressed is None else compressed
        low_rank = sum((n + m) * r for _, n, m, r in compressed)
        dense = self.blocks.numel - sum(n * m for _, n, m, _ in compressed)
        return low_rank * (FLOAT32_BYTES // 2 if self.half else FLOAT32_BYTES) + dense * FLOAT32_BYTES

    def compress_(self, rows: Tensor, states: list[UplinkState], seeds: list[int], round_idx: int) -> list[int]:
        k = rows.shape[0]
        p_all = rows + stacked(states, "residual", rows)  # what the client owes: update plus the error kept
        rows.copy_(p_all)  # dense tensors go as they are: no error for them
        compressed = self.matrices()
        q_numel = sum(m * r for _, _, m, r in compressed)
        qs = torch.empty(k, q_numel, device=rows.device, dtype=rows.dtype)
        for row, state, seed in zip(qs, states, seeds, strict=True):
            last = state.get("q") if self.warm_start else None
            if last is not None and last.numel() == q_numel:
                row.copy_(last)
            else:  # its first round, or the rank changed: random factors from the client's own stream
                row.normal_(generator=client_generator(seed, rows.device))
        offset, new_qs = 0, torch.empty_like(qs)
        for sl, n, m, r in compressed:
            matrix = p_all[:, sl].view(k, n, m)
            q = qs[:, offset : offset + m * r].reshape(k, m, r).clone()
            for _ in range(self.iterations):
                p = orthogonalize_(torch.bmm(matrix, orthogonalize_(q, self.epsilon)), self.epsilon)
                q = torch.bmm(matrix.transpose(1, 2), p)
            if self.half:  # what a float16 wire delivers
                p, q = p.half().to(rows.dtype), q.half().to(rows.dtype)
            rows[:, sl] = torch.bmm(p, q.transpose(1, 2)).reshape(k, -1)
            new_qs[:, offset : offset + m * r] = q.reshape(k, -1)
            offset += m * r
        unstacked(states, "residual", p_all - rows)
        if self.warm_start:
            unstacked(states, "q", new_qs)
        return [self.message_bytes(compressed)] * k


class PowerSGDConfig(CompressorConfig):
    """``powersgd`` (Vogels et al. 2019): each weight matrix (a tensor viewed as ``(shape[0], -1)``) as ``P Q^T``
    of ``rank`` from one power iteration, with error feedback and ``Q`` warm-started from the client's last
    round; a tensor is compressed only where ``(n + m) rank * min_compression < n m``, as torch's PowerSGD hook
    decides; ``iterations`` > 1 repeats the power iteration (a client's warm start is as old as its last turn,
    not one step), and ``half`` sends ``P`` and ``Q`` as float16, the rounding left in the error feedback."""

    kind: Literal["powersgd"] = "powersgd"
    knob: ClassVar[str | None] = "rank"
    rank: int = Field(4, ge=1, le=4096, description="rank of each matrix's approximation")
    min_compression: float = Field(2.0, ge=1, le=1e6, description="least compression to compress a tensor")
    warm_start: bool = Field(True, description="start each round's power iteration from the last Q")
    iterations: int = Field(1, ge=1, le=16, description="power iterations a round (the paper: 1)")
    half: bool = Field(False, description="send P and Q as float16 (torch's fp16_compress_wrapper)")
    stateful: ClassVar[bool] = True


@register_compressor(PowerSGDConfig)
def powersgd(cfg: PowerSGDConfig, blocks: Blocks) -> PowerSGD:
    return PowerSGD(blocks, cfg.rank, cfg.min_compression, cfg.warm_start, cfg.iterations, cfg.half)
