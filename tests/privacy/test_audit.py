"""The one-shot empirical privacy estimate (Andrew et al., ICLR 2024): its estimator against the paper's
formula on fixed cosines, and in runs: large without noise, at most the accountant's epsilon with it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from fedsim import Simulation
from fedsim.config import load_config
from fedsim.privacy.audit import bootstrap_interval, canary_clients, equal_epsilon, estimate_epsilon
from tests.conftest import tiny_config
from tests.privacy.pairs import gaussian_epsilon

ROOT = Path(__file__).resolve().parents[2]


def _fixed(mean: float, std: float, n: int) -> np.ndarray:
    """n cosines whose sample mean and (ddof=1) standard deviation are exactly ``mean`` and ``std``."""
    z = np.linspace(-1.0, 1.0, n)
    return mean + std * (z - z.mean()) / z.std(ddof=1)


def _integrated_epsilon(null: tuple[float, float], alternative: tuple[float, float], delta: float) -> float:
    """The paper's epsilon of two Gaussians by direct numerical integration of the hockey-stick divergence
    max(0, p - e^eps q) over the line, both ways; independent of the code's closed-form regions."""

    def divergence(p: tuple[float, float], q: tuple[float, float], eps: float) -> float:
        def f(x: float) -> float:
            return max(0.0, stats.norm.pdf(x, *p) - math.exp(eps) * stats.norm.pdf(x, *q))

        lo = min(p[0] - 12 * p[1], q[0] - 12 * q[1])
        hi = max(p[0] + 12 * p[1], q[0] + 12 * q[1])
        return float(integrate.quad(f, lo, hi, limit=500, points=[p[0], q[0]], epsabs=1e-13)[0])

    worst = 0.0
    for p, q in ((alternative, null), (null, alternative)):
        if divergence(p, q, 0.0) > delta:
            worst = max(worst, optimize.brentq(lambda e, p=p, q=q: divergence(p, q, e) - delta, 0.0, 200.0))
    return worst


def test_with_equal_spreads_the_estimate_is_the_gaussian_mechanisms_epsilon() -> None:
    d = 10_000  # unobserved cosines are N(0, 1/d)
    s = 1 / math.sqrt(d)
    unobserved = _fixed(0.0, s, 1000)
    for shift in (0.5, 2.0, 4.0):
        got = estimate_epsilon(_fixed(shift * s, s, 50), unobserved, 1e-5)
        assert got["epsilon_estimate"] == pytest.approx(gaussian_epsilon(shift, 1e-5), rel=1e-6)
        assert got["canary_cosine_mean"] == pytest.approx(shift * s)


@pytest.mark.slow
@pytest.mark.parametrize(("mean", "std"), [(0.02, 0.015), (0.01, 0.005), (0.0, 0.02)])
def test_with_unequal_spreads_the_estimate_matches_the_integrated_formula(mean: float, std: float) -> None:
    unobserved = _fixed(0.0, 0.01, 1000)
    got = estimate_epsilon(_fixed(mean, std, 40), unobserved, 1e-3)["epsilon_estimate"]
    assert got == pytest.approx(_integrated_epsilon((0.0, 0.01), (mean, std), 1e-3), rel=1e-4, abs=1e-6)


def test_the_equal_variance_estimate_is_the_gaussian_mechanisms_epsilon_at_the_pooled_spread() -> None:
    s = 0.01
    unobserved = _fixed(0.0, s, 1000)
    for shift in (1.0, 3.0):  # equal spreads: the pooled spread is s, the shift shift * s
        got = estimate_epsilon(_fixed(shift * s, s, 1000), unobserved, 1e-5)
        assert got["epsilon_estimate_equal_variance"] == pytest.approx(gaussian_epsilon(shift, 1e-5), rel=1e-6)
    wide = estimate_epsilon(_fixed(2 * s, 2 * s, 1000), unobserved, 1e-5)  # pooled: sqrt((4 + 1) / 2) s
    assert wide["epsilon_estimate_equal_variance"] == pytest.approx(gaussian_epsilon(2 / 2.5**0.5, 1e-5), rel=1e-3)


@pytest.mark.slow
def test_the_interval_covers_a_gaussian_mechanisms_epsilon_in_nine_of_ten_seeds() -> None:
    """Cosines of a Gaussian mechanism of known epsilon: the canaries' N(2s, s^2) against the null N(0, s^2),
    1,000 of each, 50 seeds; the truth is Balle and Wang's epsilon of a shift of 2 (tests/privacy/pairs.py)."""
    truth, s, covered = gaussian_epsilon(2.0, 1e-5), 0.01, 0
    for seed in range(50):
        rng = np.random.default_rng(seed)
        observed, unobserved = rng.normal(2 * s, s, 1000), rng.normal(0.0, s, 1000)
        low, high = bootstrap_interval(observed, unobserved, 1e-5, equal_epsilon, seed)
        covered += low is not None and high is not None and low <= truth <= high
    assert covered >= 45, covered


def test_no_canary_signal_estimates_no_privacy_loss() -> None:
    s = 0.01
    assert estimate_epsilon(_fixed(0.0, s, 200), _fixed(0.0, s, 1000), 1e-5)["epsilon_estimate"] == 0.0


def test_canaries_are_distinct_clients_of_the_population_chosen_by_the_seed() -> None:
    chosen = canary_clients(3, 100, 10)
    assert len(chosen) == 10 and all(0 <= c < 100 for c in chosen)
    assert chosen == canary_clients(3, 100, 10) != canary_clients(4, 100, 10)


def test_clipping_without_noise_shows_a_large_estimate(tmp_path: Path) -> None:
    """Every client, canaries included, takes part in every round and nothing is noised: each canary's direction
    stands out of the final model far beyond the unobserved ones."""
    privacy = {"kind": "central", "clip": 0.05, "noise_multiplier": 0.0, "audit": {"canaries": 10}}
    tree = tiny_config(
        rounds=3, clients_per_round=40, data__clients=40, model={"kind": "mlp", "hidden": [512]}, privacy=privacy
    )
    summary = Simulation(tree, out=tmp_path / "out", db=tmp_path / "runs.db").run()
    audit = summary.privacy["audit"]
    assert audit["canaries"] == 10 and audit["epsilon_estimate"] > 20, audit
    low, high = audit["epsilon_interval"]  # the equal-variance estimate's bootstrap interval
    assert low <= audit["epsilon_estimate_equal_variance"] <= high and audit["interval_level"] == 0.95
    assert "fewer than 50 canaries" in audit["note"]
    assert math.isinf(summary.privacy["epsilon"])  # the accountant: no noise, no bound
    written = json.loads((tmp_path / "out" / "summary.json").read_text())["privacy"]["audit"]
    assert written["epsilon_estimate"] == pytest.approx(audit["epsilon_estimate"])


@pytest.mark.slow
def test_the_readmes_dp_command_estimates_at_most_the_accountants_epsilon(tmp_path: Path) -> None:
    settings = ["privacy.kind=central", "privacy.clip=1.0", "privacy.noise_multiplier=1.0", "privacy.delta=1e-5"]
    cfg = load_config(ROOT / "examples" / "quickstart.yaml", [*settings, "privacy.audit.canaries=10", "progress=false"])
    summary = Simulation(cfg, out=tmp_path / "out", db=tmp_path / "runs.db").run()
    privacy = summary.privacy
    assert summary.rounds == 40
    assert 0 <= privacy["audit"]["epsilon_estimate"] <= privacy["epsilon"], privacy
