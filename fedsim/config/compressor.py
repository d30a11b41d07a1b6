"""What a message costs on the wire: each client's update on the way up (``uplink:``) and the broadcast model
on the way down (``downlink:``), dense or through one of the seed papers' compressors."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedsim.config.base import Strict

# the compressors that keep memory per client between rounds (error feedback, momentum, warm-start factors)
WITH_CLIENT_STATE = ("topk", "ef_sign", "onebit", "powersgd")


class CompressorConfig(Strict):
    """The compressor every client runs on its model update (the ``delta`` it uploads) before it is sent, or,
    as ``downlink:``, the server on the change of the model it broadcasts (with its own memory).

    ``topk``: the ``fraction`` of entries of largest magnitude, with error feedback (Stich et al. 2018).
    ``ef_sign``: EF-SignSGD (Karimireddy et al. 2019): ``p = update + residual``; per tensor, ``mean|p| *
    sign(p)`` is sent (1 bit an entry and one float32 scale) and ``p`` minus it stays as the residual.
    ``onebit``: 1-bit momentum (DeepSpeed's 1-bit Adam, Tang et al. 2021, with FedAvg's server): the client
    keeps a momentum ``m = beta m + (1 - beta) update`` of its updates; for the first ``warmup`` rounds it
    sends its update dense, then, per tensor, ``||p||_2 / sqrt(n) * sign(p)`` of ``p = m + residual`` with error
    compensation. ``qsgd`` (Alistarh et al. 2017): each ``bucket`` of entries is sent as its L2 norm and,
    per entry, a sign and a level in 0..``levels`` rounded stochastically (unbiased); ``elias`` charges the
    levels' Elias-gamma code instead of fixed-width bits. ``powersgd`` (Vogels et al. 2019): each weight
    matrix (a tensor viewed as ``(shape[0], -1)``) as ``P Q^T`` of ``rank`` from one power iteration, with error
    feedback and ``Q`` warm-started from the client's last round; a tensor is compressed only where ``(n + m)
    rank * min_compression < n m``, as torch's PowerSGD hook decides; ``iterations`` > 1 repeats the power
    iteration (a client's warm start is as old as its last turn, not one step), and ``half`` sends ``P`` and
    ``Q`` as float16, the rounding left in the error feedback. Its per-client memory lives in the state store
    like any client state.
    """

    kind: Literal["none", "topk", "ef_sign", "onebit", "qsgd", "powersgd"] = "none"
    fraction: float = Field(0.01, gt=0, le=1, description="topk: share of the entries sent")
    levels: int = Field(16, ge=1, le=65535, description="qsgd: quantization levels s")
    bucket: int = Field(512, ge=1, le=1 << 24, description="qsgd: entries sharing one norm")
    elias: bool = Field(False, description="qsgd: charge Elias-gamma coded levels")
    rank: int = Field(4, ge=1, le=4096, description="powersgd: rank of each matrix's approximation")
    min_compression: float = Field(2.0, ge=1, le=1e6, description="powersgd: least compression to compress a tensor")
    warm_start: bool = Field(True, description="powersgd: start each round's power iteration from the last Q")
    iterations: int = Field(1, ge=1, le=16, description="powersgd: power iterations a round (the paper: 1)")
    half: bool = Field(False, description="powersgd: send P and Q as float16 (torch's fp16_compress_wrapper)")
    beta: float = Field(0.9, ge=0, lt=1, description="onebit: the momentum's decay")
    warmup: int = Field(5, ge=0, le=1_000_000, description="onebit: rounds sent dense before 1-bit")

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    @property
    def keeps_client_state(self) -> bool:
        return self.kind in WITH_CLIENT_STATE
