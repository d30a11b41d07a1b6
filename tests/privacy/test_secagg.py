"""SecAgg+ as a protocol, on fixed inputs: the server recovers exactly the sum of the survivors' quantized
vectors, with dropouts up to what the threshold tolerates, and fails cleanly beyond it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from fedsim.comm.ledger import ByteLedger
from fedsim.config import parse_config
from fedsim.privacy.secagg import _QUANTIZE, HEADER, SecAggPlus, quantize
from fedsim.privacy.secagg_keys import RoundKeys, combine_secret, ring_neighbourhoods, split_secret
from fedsim.streams import noise_generator
from tests.conftest import tiny_config

NUMEL = 300
COHORT = list(range(20, 30))  # 10 clients with ids that are not their positions
CPU = torch.device("cpu")


def _secagg(**secagg: Any) -> SecAggPlus:
    tree = tiny_config(
        clients_per_round=10,
        data__clients=40,
        secagg={"kind": "secagg_plus", "num_shares": 5, "reconstruction_threshold": 3, **secagg},
    )
    cfg = parse_config(tree)  # clients weigh their samples: Flower's max weight, 1000
    return SecAggPlus(cfg.secagg, cfg.seed, 1000.0, NUMEL, CPU, announce=False)


def _inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    updates = torch.randn(len(COHORT), NUMEL, generator=generator) * 0.05
    weights = torch.randint(1, 60, (len(COHORT),), generator=generator).float()
    unclipped = (torch.rand(len(COHORT), generator=generator) < 0.5).float() - 0.5  # DP's centred bits
    return updates, weights, unclipped


def _quantized(secagg: SecAggPlus, k: int, cid: int, updates: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Client ``cid``'s vector written directly from Flower's formula, with the client's own rounding stream."""
    levels, c = secagg.levels, secagg.cfg.clipping_range
    factor = torch.round(weights[k].double() / secagg.max_weight * levels)
    generator = noise_generator(CPU, secagg.seed, secagg.round_idx, _QUANTIZE, cid)
    scaled = (updates[k].double() * (factor / levels)).clamp(-c, c)
    noise = torch.rand(NUMEL, generator=generator, dtype=torch.float64)
    return torch.floor((scaled + c) * (levels / (2 * c)) + noise).to(torch.int64)


def _run(secagg: SecAggPlus, dropped: list[int]) -> tuple[bool, dict[str, torch.Tensor], torch.Tensor]:
    """One round: every survivor adds its masked vector; returns (failed, the sums, the expected integer sum)."""
    updates, weights, unclipped = _inputs()
    secagg.begin_round(3, COHORT, dropped)
    expected = torch.zeros(HEADER + NUMEL, dtype=torch.int64)
    plain = torch.zeros(NUMEL)
    for k, cid in enumerate(COHORT):
        if cid in dropped:
            continue
        secagg.add_([cid], updates[k : k + 1], weights[k : k + 1], unclipped[k : k + 1])
        expected[0] += round(float(weights[k]) / secagg.max_weight * secagg.levels)
        expected[1] += int(2 * unclipped[k])  # doubled into an integer, -1 wrapping round the modulus
        expected[HEADER:] += _quantized(secagg, k, cid, updates, weights)
        plain += weights[k] * updates[k]
    sums = {"delta": plain.clone(), "weight": torch.zeros(1), "unclipped": torch.zeros(1)}
    failed = secagg.aggregate_(lambda t: 0, sums, ByteLedger())
    return failed, sums, expected % secagg.modulus


def test_with_no_dropout_the_unmasked_sum_is_the_sum_of_the_quantized_vectors_exactly() -> None:
    secagg = _secagg()
    failed, sums, expected = _run(secagg, dropped=[])
    assert not failed and secagg.unmasked is not None
    assert torch.equal(secagg.unmasked, expected)  # integer equality, every entry
    assert not torch.equal(secagg.masked, expected)  # what the server summed was masked
    updates, weights, _ = _inputs()
    plain = weights @ updates
    # the dequantized sum is the weighted sum up to one quantization step per client (and the weight's rounding)
    step = 2 * secagg.cfg.clipping_range / secagg.levels * secagg.max_weight
    assert (sums["delta"] - plain).abs().max() <= len(COHORT) * step
    assert float(sums["weight"]) == pytest.approx(float(weights.sum()), abs=len(COHORT) * secagg.max_weight / 2**22)
    assert float(sums["unclipped"]) == float(_inputs()[2].sum())  # signed again, halved
    assert float(sums["unclipped"]) != float((_inputs()[2] + 0.5).sum())
    assert 0 < secagg.round_metrics()["secagg_quantization_error"] < 5e-3  # type: ignore[operator]


def test_one_clients_masked_vector_looks_nothing_like_its_update() -> None:
    secagg = _secagg()
    updates, weights, unclipped = _inputs()
    secagg.begin_round(3, COHORT, [])
    secagg.add_([COHORT[0]], updates[:1], weights[:1], unclipped[:1])
    quantized = _quantized(secagg, 0, COHORT[0], updates, weights)
    masked = secagg.masked[HEADER:].double()
    # the quantized update sits near levels/2; the masked one spreads over the whole modulus
    assert (quantized.double() - secagg.levels / 2).abs().max() < secagg.levels / 10
    assert masked.std() > secagg.modulus / 4


def test_dropouts_the_threshold_tolerates_still_aggregate_the_survivors_exactly() -> None:
    secagg = _secagg()
    neighbours = ring_neighbourhoods(secagg.seed, 3, COHORT, 5)
    # two clients that are not each other's neighbours: every secret keeps 4 or more of its 5 holders
    first = COHORT[0]
    second = next(c for c in COHORT if c not in neighbours[first])
    failed, _, expected = _run(secagg, dropped=[first, second])
    assert not failed
    assert torch.equal(secagg.unmasked, expected)  # type: ignore[arg-type]


def test_beyond_the_tolerated_dropouts_the_round_fails_with_the_reason() -> None:
    secagg = _secagg()
    neighbours = ring_neighbourhoods(secagg.seed, 3, COHORT, 5)
    victim = COHORT[4]
    dropped = [c for c in neighbours[victim] if c != victim][:3]  # 1 of the victim's 5 holders left, < 3
    failed, sums, _ = _run(secagg, dropped=dropped)
    assert failed and secagg.unmasked is None
    (failure,) = secagg.failures
    assert failure["round"] == 3
    assert failure["reason"].endswith("fewer than reconstruction_threshold=3 (3 of 10 clients dropped out)")
    assert "surviving holders of its shares" in failure["reason"]
    assert float(sums["weight"]) == 0.0  # the sums were left alone
    assert secagg.round_metrics()["secagg_failed"] == 1.0


def test_shamir_shares_recover_the_secret_from_the_threshold_and_not_from_fewer() -> None:
    secret = bytes(range(32))
    shares = split_secret(secret, 3, 5)
    assert len(shares) == 5 and all(len(s) == 36 for s in shares)
    assert combine_secret(shares[1:4]) == secret
    assert combine_secret([shares[0], shares[2], shares[4]]) == secret
    assert combine_secret(shares[:2]) != secret


def test_both_ends_of_a_pair_agree_on_its_mask_key_and_every_share_reached_its_holder() -> None:
    keys = RoundKeys(0, 1, COHORT, 5, 3)
    a, b = COHORT[0], keys.neighbours[COHORT[0]][-1]
    assert keys.pair_key(a, b) == keys.pair_key(b, a)
    assert keys.pair_key(a, b) != keys.pair_key(a, COHORT[5])
    for owner, holders in keys.neighbours.items():
        assert len(holders) == 5 and owner in holders
        assert all(owner in keys.held[h] for h in holders)
    assert keys.recover(a, set(COHORT), 0) == keys.parties[a].self_seed


def test_quantize_is_unbiased() -> None:
    update = torch.full((200_000,), 0.123456789)
    q = quantize(update, torch.tensor(1.0, dtype=torch.float64), 8.0, 2**10, torch.Generator().manual_seed(0))
    recovered = q.double() * (16.0 / 2**10) - 8.0
    assert float(recovered.mean()) == pytest.approx(0.123456789, abs=2e-4)  # a step is 0.0156
    assert set(q.unique().tolist()) == {int((0.123456789 + 8) * 64), int((0.123456789 + 8) * 64) + 1}
