"""The reported epsilon is at least what a concrete pair of neighbouring populations spends.

For each mode, a pair fedsim can run: its clients' updates go through the DP stage's own clipping, and the
release's shift between the two populations is measured from what the stage would sum, in units of the
noise the stage adds (checked here against draws from the stage). The pair's epsilon is then computed by
tests/privacy/pairs.py from the pair's own output densities, not from any dp-accounting event:

- fixed-size central cohort (replace-one): every client sends +C e; in the neighbour, client 0 sends -3C e
  (clipped to -C e). The sum is m C e every round in one population and, when client 0 is sampled (m / N of
  the rounds), (m - 2) C e in the other: a shift of 2C;
- adaptive clipping (fixed-size): the same pair, whose clients' updates are exactly the round's clip (a
  client may choose its update from the public state): the update sum moves by 2C and the count of centred
  unclipped bits by 1 (+1/2 to -1/2);
- local DP: one client's update is +C e in one population and -3C e in the other, every round;
- Poisson (add-or-remove): the other clients send nothing, and client 0 sends +C e in one population only.

A pair's epsilon after fewer rounds, or with its privacy loss rounded more coarsely, is smaller still, so the
slow settings (a deployment of a million clients) compute a cheaper lower bound of the same pair.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.config import load_config, parse_config
from fedsim.privacy.dp import DifferentialPrivacy
from tests.conftest import private_stage, tiny_config
from tests.privacy.pairs import gaussian_epsilon, mixture_epsilon

ROOT = Path(__file__).resolve().parents[2]
README = ["privacy.kind=central", "privacy.clip=1.0", "privacy.noise_multiplier=1.0", "privacy.delta=1e-5"]
PFL_CIFAR10 = {"clip": 0.4, "target_epsilon": 2.0, "delta": 1e-6, "noise_cohort": 1000, "population": 1_000_000}
DIM = 8


def _stage(privacy: dict[str, Any], clients: int, cohort: int, rounds: int, sampling: str = "fixed") -> Any:
    tree = tiny_config(rounds=rounds, clients_per_round=cohort, data__clients=clients, sampling=sampling)
    return private_stage(parse_config({**tree, "privacy": privacy}), clients)


def _readme(*more: str) -> DifferentialPrivacy:
    cfg = load_config(ROOT / "examples" / "quickstart.yaml", [*README, *more])
    return private_stage(cfg, cfg.data.clients)


def _released(dp: DifferentialPrivacy, updates: torch.Tensor) -> tuple[torch.Tensor, float]:
    """What the stage sums from these clients' updates (K, DIM): the clipped update sum and the bits' sum."""
    rows = {"delta": updates.clone()}
    bits = dp.clip_(rows)
    return rows["delta"].sum(0), float(bits.sum())


def _shift(dp: DifferentialPrivacy, one: torch.Tensor, other: torch.Tensor, deployment: bool = False) -> float:
    """The release's shift between the two populations' summed cohorts, in noise standard deviations: the run's
    noise (``z * C * cohort / noise_cohort`` on the sum), or the deployment's (``z * C``) it simulates."""
    (sum_a, bits_a), (sum_b, bits_b) = _released(dp, one), _released(dp, other)
    scale = 1.0 if deployment else dp.scale
    update_std = (dp.update_noise if dp.central else dp.noise_multiplier) * dp.clip * scale
    shift = float((sum_a - sum_b).norm()) / update_std
    if dp.cfg.adaptive is not None:
        shift = math.hypot(shift, (bits_a - bits_b) / (dp.count_noise * scale))
    return shift


def _replace_pair(dp: DifferentialPrivacy, cohort: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every sampled client sends +C e; in the neighbour the differing client sends -3C e instead."""
    e = torch.zeros(DIM)
    e[0] = 1.0
    one = e.repeat(cohort, 1) * dp.clip
    other = one.clone()
    other[0] = -3 * dp.clip * e
    return one, other


def _step(q: float) -> float:
    return 1e-4 if q < 0.01 else 1e-3


# (privacy beyond the kind, clients, cohort, rounds): the fixed-size settings beside the README's and pfl's
CENTRAL_SETTINGS = [
    ({"clip": 1.0, "noise_multiplier": 0.8, "delta": 1e-5}, 1000, 10, 100),
    ({"clip": 0.1, "noise_multiplier": 2.0, "delta": 1e-5}, 20, 19, 10),
    ({"clip": 3.0, "noise_multiplier": 0.5, "delta": 1e-6}, 10_000, 100, 200),
]
ADAPTIVE = {"adaptive": {"target_quantile": 0.5, "lr": 0.2}}


def _check_run(dp: DifferentialPrivacy, clients: int, cohort: int, rounds: int) -> tuple[float, float]:
    """The run's reported epsilon after ``rounds`` and its replace-one pair's (a lower bound of the same pair
    after at most 40 rounds, and coarsely rounded, where the run's noise is small and the loss's range wide)."""
    one, other = _replace_pair(dp, cohort)
    shift, q = _shift(dp, one, other), cohort / clients
    coarse = shift > 10
    pair = mixture_epsilon(shift, q, min(rounds, 10 if coarse else rounds), dp.cfg.delta, 1e-2 if coarse else _step(q))
    return dp.summary(rounds)["epsilon"], pair


@pytest.mark.parametrize(("rounds", "least"), [(40, 72.7), (20, 46.9)])
def test_fixed_cohort_on_the_readmes_command_spends_what_its_pair_does(rounds: int, least: float) -> None:
    """The default accountant (auto: pld from the dominating pair of sampling without replacement) reports
    the README's command within 2% of its worst pair, never below; Renyi DP's bound is twice as large."""
    dp = _readme(f"rounds={rounds}")
    assert dp.summary(rounds)["accountant"] == "pld"
    reported, pair = _check_run(dp, 100, 50, rounds)
    assert pair > least  # the pair's own figure
    assert pair <= reported <= pair * 1.02, (reported, pair)
    rdp = _readme(f"rounds={rounds}", "privacy.accountant=rdp").summary(rounds)["epsilon"]
    assert rdp > 1.6 * pair


@pytest.mark.slow
@pytest.mark.parametrize("adaptive", [False, True], ids=["fixed", "adaptive"])
def test_pfl_cifar10_deployment_and_the_run_each_report_at_least_their_pairs(adaptive: bool) -> None:
    privacy = {"kind": "central", **PFL_CIFAR10, **(ADAPTIVE if adaptive else {})}
    dp = _stage(privacy, clients=1000, cohort=50, rounds=1500)
    summary = dp.summary(1500)
    deployed = summary["deployment"]
    assert deployed["epsilon"] == pytest.approx(2.0, rel=0.01)  # calibrated on the deployment
    assert deployed["accountant"] == "pld"
    one, other = _replace_pair(dp, 1000)  # the deployment's cohort, its noise
    # a loss grid of 2e-5: 1,500 compositions of the pair rounded down by 1e-4 lose 3.6% of its epsilon
    pair = mixture_epsilon(_shift(dp, one, other, deployment=True), 1000 / 1e6, 1500, 1e-6, 2e-5)
    assert pair <= deployed["epsilon"] <= pair * 1.02, (deployed["epsilon"], pair)  # so the noise is no more
    reported, run_pair = _check_run(dp, 1000, 50, 1500)
    assert reported >= run_pair > 100, (reported, run_pair)  # the run's own sum got 1/20 of the noise


@pytest.mark.parametrize(("privacy", "clients", "cohort", "rounds"), CENTRAL_SETTINGS)
@pytest.mark.parametrize("adaptive", [False, True], ids=["fixed", "adaptive"])
def test_fixed_cohorts_report_at_least_their_pairs(
    privacy: dict[str, Any], clients: int, cohort: int, rounds: int, adaptive: bool
) -> None:
    dp = _stage({"kind": "central", **privacy, **(ADAPTIVE if adaptive else {})}, clients, cohort, rounds)
    reported, pair = _check_run(dp, clients, cohort, rounds)
    assert reported >= pair > 0, (reported, pair)
    assert reported <= pair * 1.02, (reported, pair)  # pld from the dominating pair: tight


def test_adaptive_clipping_on_the_readmes_command_reports_at_least_its_pair() -> None:
    dp = _readme("privacy.adaptive.target_quantile=0.5")
    reported, pair = _check_run(dp, 100, 50, 40)
    assert reported >= pair > 60, (reported, pair)


LOCAL_SETTINGS = [  # (privacy beyond the kind, rounds)
    ({"clip": 1.0, "noise_multiplier": 2.0, "delta": 1e-5}, 5),  # the issue's: at least 11.4
    ({"clip": 0.4, "target_epsilon": 2.0, "delta": 1e-6}, 1500),  # pfl's CIFAR10 clip, delta and epsilon
    ({"clip": 1.0, "noise_multiplier": 1.0, "delta": 1e-5}, 1),
    ({"clip": 0.5, "noise_multiplier": 5.0, "delta": 1e-5, "accountant": "pld"}, 50),
    ({"clip": 2.0, "noise_multiplier": 0.7, "delta": 1e-6}, 3),
]


@pytest.mark.parametrize(("privacy", "rounds"), LOCAL_SETTINGS)
def test_local_dp_reports_at_least_the_gaussian_of_one_clients_two_inputs(privacy: dict[str, Any], rounds: int) -> None:
    dp = _stage({"kind": "local", **privacy}, clients=100, cohort=10, rounds=rounds)
    one, other = _replace_pair(dp, 1)
    pair = gaussian_epsilon(_shift(dp, one, other) * math.sqrt(rounds), privacy["delta"])  # every round
    reported = dp.summary(rounds)["epsilon"]
    # float32 clipping leaves a norm up to one ulp (6e-8) past C, and the accountant works at C: at pfl's
    # setting pld's tight epsilon is 1e-7 below this float32 pair's
    assert reported >= pair * (1 - 1e-6) and pair > 0, (reported, pair)
    if privacy.get("noise_multiplier") == 2.0:
        assert pair > 11.4


@pytest.mark.parametrize(("clients", "cohort", "z", "rounds"), [(100, 50, 1.0, 40), (1000, 10, 0.8, 100)])
def test_poisson_cohorts_report_at_least_the_add_or_remove_pair(
    clients: int, cohort: int, z: float, rounds: int
) -> None:
    privacy = {"kind": "central", "clip": 1.0, "noise_multiplier": z, "delta": 1e-5, "accountant": "pld"}
    dp = _stage(privacy, clients, cohort, rounds, sampling="poisson")
    alone, joined = torch.zeros(1, DIM), torch.zeros(1, DIM)
    joined[0, 0] = dp.clip  # client 0 is in one population only
    pair = mixture_epsilon(_shift(dp, joined, alone), cohort / clients, rounds, 1e-5, _step(cohort / clients))
    reported = dp.summary(rounds)["epsilon"]
    assert reported >= pair > 0, (reported, pair)
    assert reported <= pair * 1.05  # the PLD of a Poisson cohort is tight: the pair is the worst case


def test_the_noise_the_pairs_assume_is_the_noise_the_stage_adds() -> None:
    """The pairs above divide by the stage's update and count noise; the stage draws exactly that much."""
    privacy = {"kind": "central", "clip": 0.5, "noise_multiplier": 1.2, "delta": 1e-5, "noise_cohort": 40}
    dp = _stage({**privacy, "adaptive": {"target_quantile": 0.5, "lr": 1.0}}, clients=100, cohort=10, rounds=5)
    sums = {"delta": torch.zeros(200_000), "weight": torch.zeros(1), "unclipped": torch.zeros(1)}
    dp.release_(sums, 0)
    assert float(sums["delta"].std()) == pytest.approx(dp.update_noise * 0.5 * 10 / 40, rel=0.01)
    shares = []
    for r in range(3000):  # the clip moves by the noised share; with a learning rate of 1 its log is the share
        dp.clip = 1.0
        dp.release_({"delta": torch.zeros(1), "weight": torch.zeros(1), "unclipped": torch.zeros(1)}, r)
        shares.append(-math.log(dp.clip) + 0.5)
    spread = torch.tensor(shares).std().item() * 10  # in clients: the noised count over the cohort of 10
    assert spread == pytest.approx(dp.count_noise * 10 / 40, rel=0.05)
