"""The DP stage is what it claims: noise of z * C / noise cohort on the average, no clipped update above C,
adaptive clipping at the target quantile, local noise of z * C per client; and the paper's formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fedsim.config import parse_config
from fedsim.privacy.clip import clip_rows_, next_clip, update_noise_multiplier
from fedsim.privacy.dp import DifferentialPrivacy
from tests.conftest import private_stage, tiny_config


def _dp(**privacy: object) -> DifferentialPrivacy:
    privacy = {"kind": "central", "clip": 0.5, "delta": 1e-5, "population": 10_000, **privacy}
    tree = tiny_config(clients_per_round=5, privacy=privacy)
    return private_stage(parse_config(tree), 10)


def _sums(numel: int, unclipped: float = 0.0) -> dict[str, torch.Tensor]:
    return {"delta": torch.zeros(numel), "weight": torch.zeros(1), "unclipped": torch.full((1,), unclipped)}


@pytest.mark.parametrize("noise_cohort", [None, 40])
def test_central_noise_on_the_average_has_std_z_c_over_the_noise_cohort(noise_cohort: int | None) -> None:
    dp = _dp(noise_multiplier=1.3, noise_cohort=noise_cohort)
    averages = []
    for r in range(30):  # the average the server applies: noised sum over the fixed denominator
        sums = _sums(4000)
        dp.release_(sums, r)
        averages.append(sums["delta"] / sums["weight"])
        assert float(sums["weight"]) == 5  # the expected cohort, not the clients that came
    std = torch.stack(averages).std().item()
    assert std == pytest.approx(1.3 * 0.5 / (noise_cohort or 5), rel=0.05)
    again = _sums(4000)
    dp.release_(again, 29)
    assert torch.equal(again["delta"] / again["weight"], averages[29])  # keyed by (seed, round): every rank alike


def test_no_clipped_update_exceeds_the_clip_and_small_ones_are_untouched() -> None:
    g = torch.Generator().manual_seed(0)
    rows = {"delta": torch.randn(64, 300, generator=g) * torch.logspace(-3, 1, 64).unsqueeze(1)}
    before = rows["delta"].clone()
    norms = clip_rows_(rows, 1.0)
    after = torch.linalg.vector_norm(rows["delta"], dim=1)
    assert torch.allclose(norms, torch.linalg.vector_norm(before, dim=1))
    assert after.max().item() <= 1.0 * (1 + 1e-6)
    small = norms <= 1.0
    assert 0 < int(small.sum()) < 64
    assert torch.equal(rows["delta"][small], before[small])
    big = ~small  # clipped along their own direction to norm C exactly
    assert torch.allclose(after[big], torch.ones(int(big.sum())), atol=1e-5)
    cosine = torch.nn.functional.cosine_similarity(rows["delta"][big], before[big])
    assert torch.allclose(cosine, torch.ones_like(cosine), atol=1e-5)


def test_clipping_bounds_every_segment_of_a_client_together() -> None:
    rows = {"delta": torch.full((2, 3), 3.0), "control": torch.full((2, 4), 4.0)}  # norms sqrt(27 + 64)
    clip_rows_(rows, 2.0)
    total = (rows["delta"].square().sum(1) + rows["control"].square().sum(1)).sqrt()
    assert torch.allclose(total, torch.full((2,), 2.0))


def test_adaptive_clip_converges_to_the_target_quantile_of_the_norms() -> None:
    """Clients' update norms are lognormal(0, 0.5): the clip settles at the quantile asked for."""
    rng = np.random.default_rng(0)
    for quantile in (0.5, 0.8):
        dp = _dp(clip=5.0, noise_multiplier=1.0, noise_cohort=1000, adaptive={"target_quantile": quantile, "lr": 0.2})
        dp.cohort = 1000  # a large simulated cohort: the count's noise is the noise cohort's / 20, as the paper's
        clips = []
        for r in range(300):
            norms = rng.lognormal(0.0, 0.5, size=1000)
            rows = {"delta": torch.tensor(norms, dtype=torch.float32).unsqueeze(1)}
            sums = _sums(1, float(dp.clip_(rows).sum()))
            dp.release_(sums, r)
            clips.append(dp.clip)
        settled = float(np.mean(clips[-100:]))
        expected = math.exp(0.5 * float(torch.distributions.Normal(0, 1).icdf(torch.tensor(quantile))))
        assert settled == pytest.approx(expected, rel=0.05), (quantile, settled, expected)


def test_adaptive_clip_follows_the_papers_geometric_update() -> None:
    assert next_clip(2.0, 0.9, 0.5, 0.2) == pytest.approx(2.0 * math.exp(-0.2 * 0.4))
    assert next_clip(2.0, 0.1, 0.5, 0.2) > 2.0  # most clients clipped: the clip grows
    # Andrew et al., Theorem 1: z_update = (z^-2 - (2 sigma_b)^-2)^(-1/2)
    assert update_noise_multiplier(1.0, 5.0) == pytest.approx((1.0 - 1 / 100) ** -0.5)
    with pytest.raises(ValueError, match=r"count_noise=0\.4 is too small"):
        update_noise_multiplier(1.0, 0.4)


@pytest.mark.parametrize(("sampling", "unit"), [("poisson", 1.0), ("fixed", 2.0)])
def test_adaptive_clippings_combined_noise_multiplier_is_what_its_bits_as_sent_allow(
    sampling: str, unit: float
) -> None:
    """The update and the count of unclipped bits are one Gaussian mechanism: its multiplier, over the bits the
    clients send, is (z_update**-2 + (count_noise / s_b)**-2)**-1/2 in units of the update's sensitivity."""
    privacy = {"kind": "central", "clip": 0.5, "noise_multiplier": 1.0, "adaptive": {"count_noise": 2.0}}
    dp = private_stage(parse_config(tiny_config(clients_per_round=5, sampling=sampling, privacy=privacy)), 10)
    rows = {"delta": torch.tensor([[0.1], [0.49], [0.51], [3.0]])}  # two within the clip of 0.5, two beyond
    sent = dp.clip_(rows)
    assert sent.tolist() == [0.5, 0.5, -0.5, -0.5]  # centred: what one client adds to the released count
    # one client added or removed moves the count by its bit (at most 1/2), replaced by the difference of two
    bit_sensitivity = float(sent.abs().max()) * unit
    update_sensitivity = unit  # in clips: C added or removed, +C to -C replaced
    combined = (
        (dp.update_noise / update_sensitivity) ** -2 + (dp.count_noise / bit_sensitivity) ** -2
    ) ** -0.5 * update_sensitivity
    assert combined == pytest.approx(1.0, rel=1e-9)
    summary = dp.summary(3)
    assert summary["noise_multiplier"] == pytest.approx(combined) and summary["sensitivity"] == unit
    assert summary["count_sensitivity"] == bit_sensitivity and summary["count_noise"] == 2.0
    assert summary["update_noise_multiplier"] == pytest.approx((1.0 - 1 / 16) ** -0.5)
    assert summary["update_noise_multiplier"] > summary["noise_multiplier"]  # the update's noise grows


def test_local_noise_has_std_z_c_per_client_and_differs_between_clients() -> None:
    tree = tiny_config(privacy={"kind": "local", "clip": 0.5, "noise_multiplier": 2.0, "delta": 1e-5})
    dp = private_stage(parse_config(tree), 10)
    rows = {"delta": torch.zeros(3, 20000)}
    dp.clip_(rows)
    dp.local_noise_(4, [1, 2, 3], rows)
    for k in range(3):
        assert rows["delta"][k].std().item() == pytest.approx(2.0 * 0.5, rel=0.03)
    assert not torch.equal(rows["delta"][0], rows["delta"][1])
    again = {"delta": torch.zeros(1, 20000)}
    dp.local_noise_(4, [2], again)  # a client's noise is its own, whichever group it trains in
    assert torch.equal(again["delta"][0], rows["delta"][1])
