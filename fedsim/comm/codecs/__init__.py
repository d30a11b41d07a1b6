"""Activation codecs for split fine-tuning: ``build_codec(spec)`` from the name the edge sends.

fp32 | fp16 | int8 | lowrank:R | lowrank-int8:R | lowrank-int4:R | tucker:RT,RH
"""

from __future__ import annotations

from fedsim.comm.codecs.base import Codec, CodecError, Encoded, check_payload, relative_error
from fedsim.comm.codecs.dense import DenseCodec
from fedsim.comm.codecs.int8 import Int8Codec
from fedsim.comm.codecs.lowrank import LowRankCodec
from fedsim.comm.codecs.tucker import TuckerCodec

__all__ = ["Codec", "CodecError", "Encoded", "build_codec", "check_payload", "relative_error"]

NAMES = ("fp32", "fp16", "int8", "lowrank:R", "lowrank-int8:R", "lowrank-int4:R", "tucker:RT,RH")
FACTOR_BITS = {"lowrank": 32, "lowrank-int8": 8, "lowrank-int4": 4}
MAX_RANK = 4096


def _ranks(spec: str, arg: str, count: int) -> list[int]:
    try:
        ranks = [int(part) for part in arg.split(",")]
    except ValueError:
        ranks = []
    if len(ranks) != count or not all(1 <= r <= MAX_RANK for r in ranks):
        raise CodecError(f"codec {spec!r}: expected {count} rank(s) in 1..{MAX_RANK} after ':'")
    return ranks


def build_codec(spec: str) -> Codec:
    """The codec named ``spec``; :class:`CodecError` naming the known codecs otherwise."""
    name, _, arg = spec.partition(":")
    if name in ("fp32", "fp16", "int8") and not arg:
        return Int8Codec() if name == "int8" else DenseCodec(name)
    if name in FACTOR_BITS:
        (rank,) = _ranks(spec, arg, 1)
        return LowRankCodec(rank, bits=FACTOR_BITS[name])
    if name == "tucker":
        token_rank, hidden_rank = _ranks(spec, arg, 2)
        return TuckerCodec(token_rank, hidden_rank)
    raise CodecError(f"unknown codec {spec!r}; known: {', '.join(NAMES)}")
