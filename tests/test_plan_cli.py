"""``fedsim run CONFIG --plan``: the noise multiplier a private run calibrates and the epsilon it will spend,
printed before training, equal to what the run then records; nothing written to the output directory or the
run store; SecAgg+'s dropout tolerance against the binomial tail and hand-worked rings."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from fedsim.cli import main
from fedsim.privacy.secagg_plan import failure_rate, ring_shares
from tests.conftest import QUICKSTART

PRIVATE = ["privacy.kind=central", "privacy.clip=1.0", "privacy.target_epsilon=8"]


def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found is not None, pattern
    return float(found[1])


def _plan(tmp_path: Path, capsys: pytest.CaptureFixture[str], sets: list[str]) -> tuple[str, Path, Path]:
    out, db = tmp_path / "out", tmp_path / "runs.db"
    argv = ["run", str(QUICKSTART), *(a for s in sets for a in ("--set", s)), "--plan", "--out", str(out)]
    assert main([*argv, "--db", str(db)]) == 0
    return capsys.readouterr().out, out, db


@pytest.mark.slow
def test_the_plan_of_a_private_run_prints_its_noise_and_epsilon_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    printed, out, db = _plan(tmp_path, capsys, PRIVATE)
    assert not out.exists() and not db.exists() and list(tmp_path.iterdir()) == []
    noise = _number(r"noise multiplier ([\d.]+) \(calibrated for target_epsilon=8 in [\d.]+ s\)", printed)
    epsilon = _number(r"epsilon after 40 rounds: ([\d.]+) at delta=1e-05", printed)
    assert noise > 1 and 7.9 < epsilon <= 8  # the calibration's promise, to the 4 digits printed
    assert "replace-one neighbours, sensitivity 2C" in printed  # a fixed-size cohort's relation


@pytest.mark.slow
def test_the_plan_says_what_the_run_then_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sets = [*PRIVATE, "rounds=2", "progress=false"]
    printed, out, db = _plan(tmp_path, capsys, sets)
    noise = _number(r"noise multiplier ([\d.]+)", printed)
    epsilon = _number(r"epsilon after 2 rounds: ([\d.]+)", printed)
    argv = ["run", str(QUICKSTART), *(a for s in sets for a in ("--set", s)), "--out", str(out), "--db", str(db)]
    assert main(argv) == 0
    privacy = json.loads((out / "summary.json").read_text())["privacy"]
    assert f"{privacy['noise_multiplier']:.4g}" == f"{noise:.4g}" and f"{privacy['epsilon']:.4g}" == f"{epsilon:.4g}"


def test_secagg_plans_print_the_dropout_they_tolerate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    printed, _, _ = _plan(
        tmp_path, capsys, ["secagg.kind=secagg_plus", "secagg.num_shares=5", "secagg.reconstruction_threshold=3"]
    )
    line = next(s for s in printed.splitlines() if s.startswith("SecAgg+:"))
    assert "each secret held by 5 of the 50 clients, 3 needed" in line and "under 1% of rounds fail up to" in line


def _binomial_tail(n: int, t: int, p: float) -> float:
    """P[fewer than t of n stay], each leaving with probability p."""
    return sum(math.comb(n, j) * (1 - p) ** j * p ** (n - j) for j in range(t))


@pytest.mark.parametrize(("cohort", "threshold", "dropout"), [(5, 3, 0.3), (7, 4, 0.2), (9, 5, 0.1)])
def test_a_neighbourhood_of_the_whole_cohort_fails_as_the_binomial_tail(
    cohort: int, threshold: int, dropout: float
) -> None:
    """Every client holds every secret: a round fails when fewer than t clients stay (4 standard errors)."""
    trials = 20_000
    exact = _binomial_tail(cohort, threshold, dropout)
    drawn = failure_rate(cohort, cohort, threshold, dropout, trials=trials, seed=1)
    assert abs(drawn - exact) < 4 * math.sqrt(exact * (1 - exact) / trials)


def test_rings_worked_out_by_hand() -> None:
    """Threshold = holders: any client's leaving fails the round, 1 - (1 - p)^n; 1 of 3 holders in a cohort of
    3: it fails only when all leave, p^3; ``num_shares`` is made odd."""
    trials, p = 20_000, 0.1
    for cohort, shares in ((4, 3), (10, 5), (6, 1)):
        exact = 1 - (1 - p) ** cohort
        drawn = failure_rate(cohort, shares, shares, p, trials=trials, seed=2)
        assert abs(drawn - exact) < 4 * math.sqrt(exact * (1 - exact) / trials), (cohort, shares)
    assert abs(failure_rate(3, 3, 1, 0.5, trials=trials, seed=3) - 0.125) < 4 * math.sqrt(0.125 * 0.875 / trials)
    assert ring_shares(4, 50) == 5 and ring_shares(5, 3) == 3
    assert failure_rate(10, 3, 4, 0.0) == 1.0  # more needed than there are holders: never recoverable
