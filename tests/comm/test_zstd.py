"""+zstd: lossless Zstandard coding of any codec's payload; the cloud bounds and checks what it decompresses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import zstandard

from fedsim.comm.codecs import CodecError, Encoded, build_codec
from fedsim.split.decode import decode_batch
from fedsim.wire.batch import TokenBatch, encode_batch


def activations(rows: int = 200, cols: int = 384) -> np.ndarray:
    """Heavy-tailed like a transformer's hidden states: most values small, a few large."""
    rng = np.random.default_rng(0)
    return (rng.standard_t(3, (rows, cols)) * 0.5).astype(np.float32)


@pytest.mark.parametrize("inner", ["int8", "fp16", "lowrank-int8:8"])
def test_zstd_is_lossless_on_top_of_the_inner_codec(inner: str) -> None:
    x = activations()
    plain, packed = build_codec(inner), build_codec(f"{inner}+zstd")
    assert packed.spec == f"{inner}+zstd" and packed.dtype_name == plain.dtype_name
    ref, enc = plain.encode(x), packed.encode(x)
    assert torch.equal(packed.decode(enc), plain.decode(ref))
    assert enc.nbytes < ref.nbytes  # smaller on the wire


def test_int8_codes_shrink_by_a_stated_share() -> None:
    x = activations()
    ratio = build_codec("int8").encode(x).nbytes / build_codec("int8+zstd").encode(x).nbytes
    assert ratio > 1.2, ratio


def test_bad_zstd_payloads_are_refused() -> None:
    codec = build_codec("int8+zstd")
    good = codec.encode(activations(4, 8))
    with pytest.raises(CodecError, match="not a Zstandard frame"):
        codec.decode(Encoded(good.codec, good.shape, b"\x00" * 16))
    bomb = zstandard.ZstdCompressor().compress(b"\x00" * 10_000_000)  # 10 MB of zeros in a few hundred bytes
    with pytest.raises(CodecError, match="decompresses to 49 bytes, shape needs 48"):  # read stops at 49
        codec.decode(Encoded(good.codec, good.shape, bomb))
    short = zstandard.ZstdCompressor().compress(b"\x00" * 10)
    with pytest.raises(CodecError, match="decompresses to 10 bytes, shape needs 48"):
        codec.decode(Encoded(good.codec, good.shape, short))
    with pytest.raises(CodecError, match="unknown codec"):
        build_codec("+zstd")


def test_a_zstd_batch_passes_the_clouds_gate() -> None:
    x = activations(12, 384)
    wire = encode_batch(build_codec("int8+zstd"), TokenBatch(x, np.array([5, 7])), np.array([0, 1]))
    hidden, mask, labels = decode_batch(wire, 384, 2, 16)
    assert hidden.shape == (2, 7, 384) and mask.sum() == 12 and labels.tolist() == [0, 1]
    oversized = type(wire)(**{**wire.__dict__, "payload": wire.payload + b"\x00" * 100_000})
    with pytest.raises(Exception, match=r"allows 1\.\."):
        decode_batch(oversized, 384, 2, 16)
