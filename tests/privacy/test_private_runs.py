"""Private runs end to end: what summary.json and the run store say, the executors agreeing under DP, the
budget stopping a run, the cohort sampled by Poisson, a resumed adaptive clip, and the refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim import load_model
from fedsim.api.launch import final_weights
from fedsim.config import ConfigError, parse_config
from fedsim.runstore import RunStore
from fedsim.sim.rounds.cohort import sample_cohort
from fedsim.sim.rounds.engine import Engine
from tests.conftest import on_one_and_two_ranks, refused, tiny_config

CENTRAL = {"kind": "central", "clip": 0.5, "noise_multiplier": 1.0, "delta": 1e-5}
MLP = {"kind": "mlp", "hidden": [16]}


def _engine(tmp_path: Path, name: str, **overrides: Any) -> Engine:
    out = tmp_path / name
    return Engine(parse_config(tiny_config(**overrides)), out_dir=out, db_path=out / "runs.db")


def _epsilons(out: Path) -> list[float]:
    with RunStore.open_readonly(out / "runs.db") as store:
        (run,) = store.list_runs()
        return [json.loads(r.metrics_json)["epsilon"] for r in store.rounds(run.run_id)]


def test_a_central_run_reports_epsilon_each_round_and_the_accountants_inputs(tmp_path: Path) -> None:
    engine = _engine(tmp_path, "dp", rounds=4, privacy=CENTRAL)
    engine.run()
    summary = json.loads((tmp_path / "dp" / "summary.json").read_text())
    privacy = summary["privacy"]
    assert privacy["sampling"] == "fixed" and privacy["accountant"] == "pld"  # auto's choice at this noise
    assert privacy["accountant_setting"] == "auto"
    assert privacy["neighbours"] == "replace-one"
    assert (privacy["population"], privacy["cohort"], privacy["rounds"]) == (10, 5, 4)
    assert privacy["sampling_rate"] == 0.5 and privacy["noise_multiplier"] == 1.0
    epsilons = _epsilons(tmp_path / "dp")
    assert len(epsilons) == 4 and epsilons == sorted(epsilons) and epsilons[0] > 0
    assert privacy["epsilon"] == pytest.approx(epsilons[-1])
    plain = _engine(tmp_path, "plain", rounds=4)
    plain.run()
    assert "privacy" not in json.loads((tmp_path / "plain" / "summary.json").read_text())
    assert not torch.allclose(engine.global_state, plain.global_state, atol=1e-3)


@pytest.mark.parametrize(
    "privacy",
    [CENTRAL, {**CENTRAL, "adaptive": {"target_quantile": 0.5}}, {**CENTRAL, "kind": "local", "noise_multiplier": 0.2}],
)
def test_the_fused_executor_privatizes_as_the_sequential_one(tmp_path: Path, privacy: dict[str, Any]) -> None:
    weights = {}
    for kind in ("sequential", "fused"):
        executor = {"kind": kind, "clients": 3}
        engine = _engine(tmp_path, kind, model=MLP, privacy=privacy, clients_per_round=7, executor=executor)
        engine.run()
        weights[kind] = engine.global_state
    torch.testing.assert_close(weights["fused"], weights["sequential"], rtol=0, atol=2e-5)


@pytest.mark.slow
def test_two_ranks_add_the_same_noise_as_one(tmp_path: Path) -> None:
    """Every rank draws the central noise from the (seed, round) stream onto the same all-reduced sum."""
    privacy = {**CENTRAL, "adaptive": {"target_quantile": 0.5}}
    one, two = on_one_and_two_ranks(tiny_config(model=MLP, privacy=privacy), tmp_path)
    torch.testing.assert_close(two, one, rtol=0, atol=2e-5)


def test_max_epsilon_stops_the_run_before_the_round_that_would_pass_it_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    privacy = {**CENTRAL, "noise_multiplier": 4.0, "max_epsilon": 3.0}
    engine = _engine(tmp_path, "budget", rounds=30, eval_every=4, privacy=privacy)
    summary = engine.run()
    epsilons = _epsilons(tmp_path / "budget")
    assert 0 < summary.rounds < 30 and len(epsilons) == summary.rounds
    assert summary.rounds % 4 != 0  # the last evaluation that was due came before the stop
    assert epsilons[-1] <= 3.0 < engine.privacy.epsilon(summary.rounds + 1)  # type: ignore[union-attr]
    assert summary.privacy["stopped_before_round"] == summary.rounds
    said = capsys.readouterr().err
    assert f"stopped before round {summary.rounds} after {summary.rounds} rounds" in said
    assert "privacy.max_epsilon=3" in said
    # final_accuracy is the saved model's, evaluated here independently of the engine's evaluation
    model = load_model(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 10)), tmp_path / "budget")
    test = engine.dataset.test
    with torch.no_grad():
        accuracy = float((model(test.x).argmax(1) == test.y).float().mean())
    assert summary.final_accuracy == pytest.approx(accuracy, abs=1e-6)


def test_poisson_cohorts_have_binomial_sizes_and_are_deterministic() -> None:
    sizes = [len(sample_cohort(7, r, 10_000, 100, sampling="poisson")) for r in range(400)]
    assert len(set(sizes)) > 10
    assert sum(sizes) / len(sizes) == pytest.approx(100, rel=0.03)
    assert sample_cohort(7, 3, 10_000, 100, sampling="poisson") == sample_cohort(7, 3, 10_000, 100, sampling="poisson")
    assert sample_cohort(7, 3, 10_000, 100) == sample_cohort(7, 3, 10_000, 100, sampling="fixed")


def test_a_resumed_run_goes_on_from_the_adaptive_clip_it_had_and_audits_alike(tmp_path: Path) -> None:
    """The audit compares the final model with the one before round 0, also after a resume."""
    privacy = {**CENTRAL, "adaptive": {"target_quantile": 0.3, "lr": 0.5}, "audit": {"canaries": 3}}
    tree = {"rounds": 4, "privacy": privacy, "checkpoint": {"every": 2}}
    whole = _engine(tmp_path, "whole", **tree)
    whole.run()
    cut = _engine(tmp_path, "cut", **tree)
    cut.run(after_round=lambda row: row.round == 1)
    resumed = Engine(parse_config(tiny_config(**tree)), tmp_path / "cut", tmp_path / "cut" / "runs.db", resume=True)
    assert resumed.privacy is not None and resumed.privacy.clip == cut.privacy.clip != 0.5  # type: ignore[union-attr]
    resumed.run()
    torch.testing.assert_close(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"))
    audits = [json.loads((tmp_path / n / "summary.json").read_text())["privacy"]["audit"] for n in ("cut", "whole")]
    assert audits[0]["epsilon_estimate"] == pytest.approx(audits[1]["epsilon_estimate"], rel=1e-5)
    assert audits[0]["canary_cosine_mean"] == pytest.approx(audits[1]["canary_cosine_mean"], rel=1e-4)


@pytest.mark.parametrize("name", ["scaffold", "fednova"])
def test_an_algorithm_dp_cannot_keep_private_is_refused_with_the_reason(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=f"algorithm {name} sums .* not one model update per client"):
        _engine(tmp_path, name, algorithm={"kind": name, "lr": 0.1}, privacy=CENTRAL)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("privacy.delta=1", "privacy.delta"),
        ("privacy.noise_cohort=20", "noise_cohort=20 is smaller than the cohort"),
        ("privacy.accountant=moments", "privacy.accountant"),
        ("privacy.target_epsilon=1e-4", "exactly one of noise_multiplier and target_epsilon"),
    ],
)
def test_impossible_settings_are_one_line_and_exit_2(
    tmp_path: Path, setting: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["privacy.kind=central", "privacy.clip=1", "privacy.noise_multiplier=1"]
    assert message in refused(tmp_path, capsys, [*base, setting])


def test_a_target_epsilon_the_accountant_cannot_reach_is_one_config_error(tmp_path: Path) -> None:
    privacy = {"kind": "central", "clip": 0.5, "target_epsilon": 1e-4, "delta": 1e-5}
    with pytest.raises(ConfigError, match="not reached even with noise_multiplier=1000"):
        _engine(tmp_path, "far", rounds=500, clients_per_round=10, privacy=privacy)


def test_auto_takes_rdp_below_the_noise_a_pld_is_built_for_and_an_explicit_pld_there_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small = {**CENTRAL, "noise_multiplier": 0.2}
    engine = _engine(tmp_path, "small", rounds=2, privacy=small)
    engine.run()
    summary = json.loads((tmp_path / "small" / "summary.json").read_text())["privacy"]
    assert (summary["accountant"], summary["accountant_setting"]) == ("rdp", "auto")
    base = ["privacy.kind=central", "privacy.clip=1", "privacy.noise_multiplier=0.2"]
    assert "accountant=pld handles 0.3 and more" in refused(tmp_path, capsys, [*base, "privacy.accountant=pld"])


def test_rdps_convergence_warnings_are_one_line_not_hundreds(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A Poisson cohort at rate 0.1 and noise 1 makes dp-accounting's RDP log 'failed to converge' for many
    orders (its own test uses this event); the run says one line instead, naming the tighter accountant."""
    privacy = {**CENTRAL, "noise_multiplier": 1.0, "accountant": "rdp"}
    engine = _engine(tmp_path, "loud", rounds=2, clients_per_round=1, sampling="poisson", privacy=privacy)
    engine.run()
    err = capfd.readouterr().err
    assert "failed to converge" not in err
    assert err.count("the RDP accountant left out") == 1 and "privacy.accountant=pld" in err, err
    assert math.isfinite(json.loads((tmp_path / "loud" / "summary.json").read_text())["privacy"]["epsilon"])
