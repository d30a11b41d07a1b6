"""Lossless entropy coding of any codec's payload with Zstandard: ``int8+zstd``, ``lowrank-int8:32+zstd``.

The inner codec's payload is compressed on the edge and decompressed on the cloud before the inner codec decodes
it, so what the model sees is unchanged and only the bytes on the wire shrink (int8 activations are far from
uniform: small values dominate). The cloud bounds decompression by the inner payload's exact size for the
message's shape, so a small message cannot expand into a large allocation, and it checks the result's length.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

import zstandard
from numpy.typing import ArrayLike

from fedsim.comm.codecs.base import Codec, CodecError, Encoded

if TYPE_CHECKING:
    from torch import Tensor

SUFFIX = "+zstd"
LEVEL = 3  # zstd's default: fast enough to keep up with the bottom on an edge CPU


def compress_bound(size: int) -> int:
    """The largest a Zstandard frame of ``size`` input bytes can be (ZSTD_COMPRESSBOUND)."""
    return size + (size >> 8) + (((128 << 10) - size) >> 11 if size < (128 << 10) else 0) + 64


class ZstdCodec:
    """``inner``'s payload, Zstandard-compressed; shape, rank and dtype are the inner codec's."""

    def __init__(self, inner: Codec) -> None:
        self.inner = inner
        self.spec = inner.spec + SUFFIX
        self.ndim = inner.ndim
        self.dtype_name = inner.dtype_name
        self.variable = True  # the payload's length depends on its content: at most payload_bytes(shape)

    def payload_bytes(self, shape: tuple[int, ...]) -> int:
        return compress_bound(self.inner.payload_bytes(shape))

    def encode(self, x: ArrayLike) -> Encoded:
        raw = self.inner.encode(x)
        return Encoded(self.spec, raw.shape, zstandard.ZstdCompressor(level=LEVEL).compress(raw.payload))

    def decode(self, encoded: Encoded) -> Tensor:
        want = self.inner.payload_bytes(encoded.shape)
        try:  # read at most one byte past the size the shape allows, whatever the frame header claims
            with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(encoded.payload)) as reader:
                raw = reader.read(want + 1)
        except zstandard.ZstdError as exc:
            raise CodecError(f"codec {self.spec}: payload is not a Zstandard frame of {want} bytes ({exc})") from None
        if len(raw) != want:
            raise CodecError(f"codec {self.spec}: payload decompresses to {len(raw)} bytes, shape needs {want}")
        return self.inner.decode(Encoded(self.inner.spec, encoded.shape, raw))
