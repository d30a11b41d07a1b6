"""Activation codecs for split fine-tuning: ``build_codec(spec)`` from the name the edge sends.

The built-in codecs are registered here, in the one registry (:mod:`fedsim.comm.codecs.registry`) that config
validation, the command line (``fedsim codecs``), the gRPC service and the docs read. A codec of your own is
one :func:`register_codec` call away.
"""

from __future__ import annotations

from fedsim.comm.codecs.base import Codec, CodecError, Encoded, check_payload, relative_error
from fedsim.comm.codecs.dense import DenseCodec
from fedsim.comm.codecs.int8 import Int8Codec
from fedsim.comm.codecs.lowrank import LowRankCodec
from fedsim.comm.codecs.registry import build_codec, codec_usages, codecs, register_codec, unregister_codec
from fedsim.comm.codecs.shared_basis import SharedBasisCodec
from fedsim.comm.codecs.tucker import TuckerCodec

__all__ = [
    "Codec",
    "CodecError",
    "Encoded",
    "build_codec",
    "check_payload",
    "codec_usages",
    "codecs",
    "register_codec",
    "relative_error",
    "unregister_codec",
]

MAX_RANK = 4096


def ranks(name: str, arg: str, count: int) -> list[int]:
    """``count`` comma-separated ranks in 1..MAX_RANK after ``name:``, or :class:`CodecError` naming the spec."""
    spec = f"{name}:{arg}" if arg else name
    parts = arg.split(",")
    # ASCII digits only: int() also takes '1_0' and full-width digits, which no codec spec should mean
    parsed = [int(part) for part in parts] if all(p.isascii() and p.isdigit() for p in parts) else []
    if len(parsed) != count or not all(1 <= r <= MAX_RANK for r in parsed):
        raise CodecError(f"codec {spec!r}: expected {count} rank(s) in 1..{MAX_RANK} after ':'")
    return parsed


register_codec(
    "fp32",
    lambda arg: _plain("fp32", arg, DenseCodec("fp32")),
    summary="float32 as is: the uncompressed baseline, padding stripped",
)
register_codec("fp16", lambda arg: _plain("fp16", arg, DenseCodec("fp16")), summary="float16, 2x")
register_codec(
    "int8", lambda arg: _plain("int8", arg, Int8Codec()), summary="int8 with one float32 scale per token, about 4x"
)


def _lowrank(name: str, bits: int) -> None:
    def factory(arg: str) -> Codec:
        return LowRankCodec(ranks(name, arg, 1)[0], bits=bits)

    kind = "float32" if bits == 32 else f"int{bits}"
    summary = f"rank-R factors of the batch's token matrix (tensorly's randomised SVD), as {kind}"
    register_codec(name, factory, usage=f"{name}:R", summary=summary)


_lowrank("lowrank", 32)
_lowrank("lowrank-int8", 8)
_lowrank("lowrank-int4", 4)
register_codec(
    "basis",
    lambda arg: SharedBasisCodec(ranks("basis", arg, 1)[0]),
    usage="basis:R",
    summary="R coefficients per token on a PCA basis fitted once to the edge's own sentences, sent once",
)
register_codec(
    "basis-int8",
    lambda arg: SharedBasisCodec(ranks("basis-int8", arg, 1)[0], bits=8),
    usage="basis-int8:R",
    summary="basis:R with int8 coefficients (a float32 scale per token)",
)
register_codec(
    "tucker",
    lambda arg: TuckerCodec(*ranks("tucker", arg, 2)),
    usage="tucker:RT,RH",
    summary="Tucker core and token/hidden factors of the padded batch (tensorly)",
)


def _plain(name: str, arg: str, codec: Codec) -> Codec:
    if arg:
        raise CodecError(f"unknown codec {name + ':' + arg!r}; known: {codec_usages().replace(' | ', ', ')}")
    return codec
