"""Each uplink compressor against a direct numpy implementation of its paper's formula on fixed inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedsim.comm.uplink import Blocks, build_compressor
from fedsim.comm.uplink.ef_sign import EFSign
from fedsim.comm.uplink.onebit import OneBit
from fedsim.comm.uplink.qsgd import QSGD
from fedsim.config import COMPRESSORS

BLOCKS = Blocks(((3, 4), (4,), (5,)))  # a 3x4 weight, a bias, a vector: 21 entries


def _update(seed: int, k: int = 1) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).normal(size=(k, BLOCKS.numel))).float()


def _empty() -> dict[str, torch.Tensor]:
    return {}  # a client's uplink state before its first turn


def _sign(x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, 1.0, -1.0)


def test_ef_sign_sends_the_mean_magnitude_times_the_sign_per_tensor_and_keeps_the_rest() -> None:
    sign, state = EFSign(BLOCKS), _empty()
    e = np.zeros(BLOCKS.numel)
    for r in range(3):  # three rounds: the residual feeds back
        g = _update(r)
        rows = g.clone()
        (nbytes,) = sign.compress_(rows, [state], [0], r)
        p = g[0].double().numpy() + e
        expected = np.concatenate(
            [np.abs(p[a:b]).sum() / (b - a) * _sign(p[a:b]) for a, b in ((0, 12), (12, 16), (16, 21))]
        )
        e = p - expected
        np.testing.assert_allclose(rows[0].numpy(), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(state["residual"].numpy(), e, rtol=1e-5, atol=1e-6)
        assert nbytes == (2 + 4) + (1 + 4) + (1 + 4)  # ceil(n / 8) bytes of signs and a float32 scale a tensor


def test_onebit_sends_dense_during_warmup_then_the_compensated_sign_of_its_momentum() -> None:
    beta, onebit, state = 0.9, OneBit(BLOCKS, 0.9, warmup=2), _empty()
    m, e = np.zeros(BLOCKS.numel), np.zeros(BLOCKS.numel)
    for r in range(5):
        g = _update(10 + r)
        rows = g.clone()
        (nbytes,) = onebit.compress_(rows, [state], [0], r)
        m = beta * m + (1 - beta) * g[0].double().numpy()
        np.testing.assert_allclose(state["momentum"].numpy(), m, rtol=1e-5, atol=1e-7)
        if r < 2:
            assert torch.equal(rows, g) and nbytes == 4 * BLOCKS.numel
            continue
        p = m + e
        parts = [np.linalg.norm(p[a:b]) / math.sqrt(b - a) * _sign(p[a:b]) for a, b in ((0, 12), (12, 16), (16, 21))]
        expected = np.concatenate(parts)
        e = p - expected
        np.testing.assert_allclose(rows[0].numpy(), expected, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(state["residual"].numpy(), e, rtol=1e-5, atol=1e-6)
        assert nbytes == 16


def _qsgd_numpy(v: np.ndarray, u: np.ndarray, s: int, bucket: int) -> tuple[np.ndarray, np.ndarray]:
    out, levels = np.zeros_like(v), np.zeros_like(v)
    for a in range(0, len(v), bucket):
        x, norm = v[a : a + bucket], np.linalg.norm(v[a : a + bucket])
        scaled = np.abs(x) / norm * s if norm > 0 else np.zeros_like(x)
        low = np.floor(scaled)
        level = low + (u[a : a + bucket] < scaled - low)
        out[a : a + bucket], levels[a : a + bucket] = norm * np.sign(x) * level / s, level
    return out, levels


def _elias_gamma(n: int) -> str:
    """The Elias-gamma code of n >= 1 as a bit string: floor(log2 n) zeros, then n in binary."""
    binary = bin(n)[2:]
    return "0" * (len(binary) - 1) + binary


@pytest.mark.parametrize(("levels", "bucket"), [(1, 5), (4, 8), (16, 21)])
def test_qsgd_rounds_each_bucket_to_its_levels_as_the_paper_defines(levels: int, bucket: int) -> None:
    qsgd = QSGD(levels, bucket, elias=False)
    v = _update(7)
    u = torch.from_numpy(np.random.default_rng(8).random((1, math.ceil(21 / bucket) * bucket))).float()
    decoded, got_levels = qsgd.quantize(v.clone(), u)
    expected, expected_levels = _qsgd_numpy(v[0].double().numpy(), u[0, :21].double().numpy(), levels, bucket)
    np.testing.assert_allclose(decoded[0].numpy(), expected, rtol=1e-5, atol=1e-6)
    assert got_levels[0].tolist() == expected_levels.tolist()
    assert qsgd.message_bytes(got_levels) == [
        math.ceil((32 * math.ceil(21 / bucket) + 21 * (1 + math.ceil(math.log2(levels + 1)))) / 8)
    ]
    elias = QSGD(levels, bucket, elias=True).message_bytes(got_levels)
    bits = "".join(f"{b:032b}" for b in range(math.ceil(21 / bucket)))  # the norms
    bits += "".join(_elias_gamma(int(lv) + 1) + ("1" if lv > 0 else "") for lv in expected_levels)
    assert elias == [math.ceil(len(bits) / 8)]  # the exact length of the coded message


def test_qsgd_is_unbiased_over_its_random_draws() -> None:
    qsgd = QSGD(2, 8, elias=False)
    v = _update(9)
    draws = torch.stack(
        [qsgd.quantize(v, torch.rand(1, 24, generator=torch.Generator().manual_seed(s)))[0][0] for s in range(4000)]
    )
    np.testing.assert_allclose(draws.mean(0).numpy(), v[0].numpy(), atol=0.06)


@pytest.mark.parametrize("kind", sorted(set(COMPRESSORS.kinds()) - {"none"}))
def test_k_clients_at_once_equal_one_after_another(kind: str) -> None:
    """The fused executor compresses its group's stacked rows in one call: the same rows, states and bytes."""
    settings = {"rank": 2, "fraction": 0.2, "levels": 4, "bucket": 8, "warmup": 1, "min_compression": 1}
    entry = COMPRESSORS.entry(kind)
    assert entry is not None
    own = {k: v for k, v in settings.items() if k in entry.config.model_fields}  # the kind's own settings
    compressor = build_compressor(entry.config.model_validate({"kind": kind, **own}), BLOCKS)
    rows, states = _update(3, k=3), [_empty(), _empty(), _empty()]
    singles = [(rows[k : k + 1].clone(), _empty()) for k in range(3)]
    compressor.compress_(rows[:1].clone(), states[:1], [11], 0)  # one client has memory, the others not yet
    compressor.compress_(rows[:1].clone(), [singles[0][1]], [11], 0)
    for r in range(1, 4):
        batch = rows * (r + 1)
        sent = compressor.compress_(batch, states, [11, 12, 13], r)
        for k, (row, state) in enumerate(singles):
            one = row * (r + 1)
            assert compressor.compress_(one, [state], [11 + k], r) == [sent[k]]
            torch.testing.assert_close(one[0], batch[k], rtol=1e-5, atol=1e-6)
            assert state.keys() == states[k].keys()
            for name in state:
                torch.testing.assert_close(state[name], states[k][name], rtol=1e-5, atol=1e-6)
