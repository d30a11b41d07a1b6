"""The shared-basis codec: the basis travels once, then r coefficients per token; the cloud checks what it is
sent and refuses a message whose basis it never saw."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsim.comm.codecs import CodecError, Encoded, build_codec, relative_error, shared_basis
from fedsim.split.decode import decode_batch
from fedsim.wire.batch import TokenBatch, encode_batch


def tokens(n: int, seed: int, rank: int = 6, d: int = 64) -> np.ndarray:
    """Tokens on a rank-``rank`` subspace plus a mean offset and a little noise."""
    rng = np.random.default_rng(seed)
    basis = np.random.default_rng(99).standard_normal((rank, d))
    return (rng.standard_normal((n, rank)) @ basis + 3.0 + 0.01 * rng.standard_normal((n, d))).astype(np.float32)


@pytest.fixture(autouse=True)
def fresh_cloud(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shared_basis, "BASES", shared_basis._Bases())


def test_the_basis_travels_once_then_only_coefficients() -> None:
    codec = build_codec("basis:8")
    first, second = codec.encode(tokens(50, 0)), codec.encode(tokens(30, 1))
    assert first.nbytes == 12 + (64 + 8 * 64) * 4 + 50 * 8 * 4
    assert second.nbytes == 12 + 30 * 8 * 4  # 8 floats per token instead of 64
    cloud = build_codec("basis:8")  # the cloud's own instance: it knows the basis only from the message
    for message, x in ((first, tokens(50, 0)), (second, tokens(30, 1))):
        assert relative_error(x, cloud.decode(message).numpy()) < 0.01  # the data sit on the basis


def test_int8_coefficients_cost_a_quarter() -> None:
    codec = build_codec("basis-int8:8")
    codec.encode(tokens(50, 0))
    second = codec.encode(tokens(30, 1))
    assert second.nbytes == 12 + 30 * (8 + 4)
    assert relative_error(tokens(30, 1), build_codec("basis-int8:8").decode(second).numpy()) < 0.02


def test_a_message_whose_basis_was_never_sent_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    codec = build_codec("basis:8")
    codec.encode(tokens(50, 0))
    later = codec.encode(tokens(30, 1))
    monkeypatch.setattr(shared_basis, "BASES", shared_basis._Bases())  # a cloud that missed the first message
    with pytest.raises(CodecError, match=r"basis [0-9a-f]{16} was never sent"):
        build_codec("basis:8").decode(later)


def test_a_tampered_or_malformed_basis_is_refused() -> None:
    first = build_codec("basis:8").encode(tokens(50, 0))
    raw = bytearray(first.payload)
    raw[20] ^= 0xFF  # inside the mean
    with pytest.raises(CodecError, match="does not match its id"):
        build_codec("basis:8").decode(Encoded(first.codec, first.shape, bytes(raw)))
    raw = bytearray(first.payload)
    raw[8] = 7
    with pytest.raises(CodecError, match="flag 7 is neither 0 nor 1"):
        build_codec("basis:8").decode(Encoded(first.codec, first.shape, bytes(raw)))
    with pytest.raises(CodecError, match="payload with its basis is"):
        build_codec("basis:8").decode(Encoded(first.codec, first.shape, first.payload[:-4]))


def test_shared_basis_batches_pass_the_clouds_gate() -> None:
    codec = build_codec("basis-int8:8")
    lengths = np.array([20, 30])
    for seed in (0, 1):
        wire = encode_batch(codec, TokenBatch(tokens(50, seed), lengths), np.array([0, 1]))
        hidden, mask, _ = decode_batch(wire, 64, 2, 32)
        assert hidden.shape == (2, 30, 64) and int(mask.sum()) == 50
        assert bool(torch.isfinite(hidden).all())


def test_a_calibration_pass_over_the_edges_own_sentences_fixes_the_basis_before_the_first_batch() -> None:
    """``calibrate`` fits the basis to the first ``calibration_sentences`` of an edge's data, whatever the first
    batch is; a codec that learns nothing is left alone."""
    from fedsim.data.sst2 import Sentences
    from fedsim.split.edge_side import calibrate

    class Bottom:  # sentence k: k+1 tokens from tokens(.., seed=k); the calls are counted
        calls = 0

        def encode(self, texts: list[str]) -> TokenBatch:
            Bottom.calls += 1
            rows = [tokens(int(t) + 1, int(t)) for t in texts]
            return TokenBatch(np.concatenate(rows), np.array([len(r) for r in rows]))

    data = Sentences([str(k) for k in range(200)], np.zeros(200, dtype=np.int64))
    codec = build_codec("basis:4")
    calibrate(codec, Bottom(), data, sentences=130, batch=64)
    assert Bottom.calls == 3  # 130 sentences in batches of 64
    want = build_codec("basis:4")
    want.calibrate(np.concatenate([tokens(k + 1, k) for k in range(130)]))  # type: ignore[attr-defined]
    first = codec.encode(tokens(3, 500))  # a batch from elsewhere does not move the basis
    assert first.payload == want.encode(tokens(3, 500)).payload
    plain = build_codec("int8")
    calibrate(plain, Bottom(), data, sentences=130)
    assert Bottom.calls == 3
