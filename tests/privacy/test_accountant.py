"""fedsim's epsilon against dp-accounting called directly and Opacus's RDP accountant, on pfl-research's
benchmark settings; the noise calibrated for a target epsilon spends that epsilon.

The direct calls state each relation's sensitivity here, by hand: a Poisson cohort is add-or-remove-one, one
client moves the clipped sum by at most C (sensitivity 1); a fixed-size cohort is sampled without
replacement, replace-one, and one client moves it by up to 2C (+C to -C). dp-accounting takes noise over
sensitivity. Whether those sensitivities are right is tested against concrete pairs in test_neighbours.py."""

from __future__ import annotations

import dp_accounting
import pytest
from opacus.accountants.analysis import rdp as opacus_rdp

from fedsim.config import parse_config
from fedsim.privacy.accountant import Accounting, EpsilonCurve
from tests.conftest import private_stage, tiny_config
from tests.privacy.pairs import gaussian_epsilon

# pfl-research's benchmarks (benchmarks/image_classification, benchmarks/lm): delta 1e-6; CIFAR10 with a noise
# cohort of 1,000 out of 1e6 clients for 1,500 central iterations, StackOverflow 5,000 of its 342,477 users
# for 2,000; noise multipliers near what epsilon 2 needs there.
SETTINGS = {"cifar10": (1_000_000, 1_000, 1_500, 0.73), "stackoverflow": (342_477, 5_000, 2_000, 1.1)}
DELTA = 1e-6


def _direct(sampling: str, accountant: str, population: int, cohort: int, rounds: int, z: float) -> float:
    """Epsilon from dp-accounting's own objects, built here without fedsim."""
    gaussian = dp_accounting.GaussianDpEvent(z / (1.0 if sampling == "poisson" else 2.0))
    if sampling == "poisson":
        event = dp_accounting.PoissonSampledDpEvent(cohort / population, gaussian)
        relation = dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE
    else:
        event = dp_accounting.SampledWithoutReplacementDpEvent(population, cohort, gaussian)
        relation = dp_accounting.NeighboringRelation.REPLACE_ONE
    if accountant == "pld":
        fresh: dp_accounting.PrivacyAccountant = dp_accounting.pld.PLDAccountant(relation)
    else:
        fresh = dp_accounting.rdp.RdpAccountant(neighboring_relation=relation)
    return float(fresh.compose(dp_accounting.SelfComposedDpEvent(event, rounds)).get_epsilon(DELTA))


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize(("sampling", "accountant"), [("poisson", "pld"), ("poisson", "rdp"), ("fixed", "rdp")])
def test_epsilon_matches_dp_accounting_called_directly(setting: str, sampling: str, accountant: str) -> None:
    population, cohort, rounds, z = SETTINGS[setting]
    curve = EpsilonCurve(Accounting("central", accountant, sampling, population, cohort, DELTA), z)
    for done in (1, rounds // 3, rounds):
        expected = _direct(sampling, accountant, population, cohort, done, z)
        if accountant == "pld":  # fedsim's coarser loss grid, rounded pessimistically: never below, 0.2% above
            assert expected <= curve(done) <= expected * 1.002, (done, curve(done), expected)
        else:
            assert curve(done) == pytest.approx(expected, rel=1e-3), (done, curve(done), expected)
    assert 0 < curve(1) < curve(rounds // 3) < curve(rounds)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_poisson_rdp_matches_opacus_within_one_percent(setting: str) -> None:
    population, cohort, rounds, z = SETTINGS[setting]
    orders = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))  # Opacus's default orders
    rdp = opacus_rdp.compute_rdp(q=cohort / population, noise_multiplier=z, steps=rounds, orders=orders)
    opacus_epsilon, _ = opacus_rdp.get_privacy_spent(orders=orders, rdp=rdp, delta=DELTA)
    ours = EpsilonCurve(Accounting("central", "rdp", "poisson", population, cohort, DELTA), z)(rounds)
    assert ours == pytest.approx(opacus_epsilon, rel=0.01)


@pytest.mark.slow
@pytest.mark.parametrize(("sampling", "accountant"), [("poisson", "pld"), ("poisson", "rdp"), ("fixed", "rdp")])
def test_target_epsilon_calibration_lands_within_one_percent(sampling: str, accountant: str) -> None:
    privacy = {"kind": "central", "clip": 0.4, "target_epsilon": 2.0, "delta": DELTA}
    privacy |= {"noise_cohort": 1000, "population": 1_000_000, "accountant": accountant}
    cfg = parse_config(tiny_config(rounds=1500, sampling=sampling, privacy=privacy))
    dp = private_stage(cfg, 10)
    spent = _direct(sampling, accountant, 1_000_000, 1000, 1500, dp.noise_multiplier)
    assert spent == pytest.approx(2.0, rel=0.01)
    assert spent <= 2.0 * (1 + 1e-3)  # the calibrated noise does not overspend beyond the search's tolerance
    summary = dp.summary(1500)
    assert summary["deployment"]["epsilon"] == pytest.approx(spent, rel=1e-3)  # the target is the deployment's
    assert summary["deployment"]["population"] == 1_000_000 and summary["deployment"]["noise_cohort"] == 1000
    # the run itself: 10 clients, its own small cohort, and the noise its sum got (z * cohort / noise cohort)
    assert summary["population"] == 10 and summary["effective_noise_multiplier"] < dp.noise_multiplier / 100
    assert summary["epsilon"] > 100 * spent


def test_local_dp_composes_the_gaussian_of_sensitivity_2c_over_every_round() -> None:
    curve = EpsilonCurve(Accounting("local", "rdp", "fixed", 100, 10, 1e-5), 4.0)
    direct = dp_accounting.rdp.RdpAccountant().compose(  # two inputs of one client differ by up to 2C
        dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(4.0 / 2), 20)
    )
    assert curve(20) == pytest.approx(direct.get_epsilon(1e-5), rel=1e-6)
    # with PLDs, the Gaussian mechanism's exact epsilon (Balle and Wang's closed form) for a shift of 2C over
    # noise 4C in each of 20 rounds, from above (a PLD rounds pessimistically)
    exact = gaussian_epsilon(2 / 4.0 * 20**0.5, 1e-5)
    tight = EpsilonCurve(Accounting("local", "pld", "fixed", 100, 10, 1e-5), 4.0)(20)
    assert exact <= tight <= exact * 1.01
