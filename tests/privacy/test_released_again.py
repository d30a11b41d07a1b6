"""No round is released twice unaccounted. A run under ``noise_seed: system`` that crashes after writing rounds
past its last checkpoint, and resumes, trains those rounds again with fresh noise: each of them is then
released twice, and the epsilon the run reports counts it so. A run-seeded resume replays the same noise, so
it releases nothing new.

The reference is a closed form, independent of fedsim's accountant: on the trace clock each round is one
unsampled Gaussian release of sensitivity 1 (one client's updates zeroed); two releases of one round at noise
z are one at z / sqrt(2), and n Gaussian releases at z compose to one Gaussian of mu = sqrt(n) / z (Dong, Roth
and Su's GDP), whose exact epsilon at delta is Balle and Wang's (ICML 2018, Theorem 8). A run of R rounds that
released L of them again is therefore the Gaussian of mu = sqrt(R + L) / z.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from scipy.optimize import brentq
from scipy.stats import norm

from fedsim.privacy.accountant import Accounting
from tests.conftest import tiny_config

Z, DELTA, ROUNDS = 2.0, 1e-5, 40


def gaussian_epsilon(releases: int, noise_multiplier: float, delta: float) -> float:
    mu = math.sqrt(releases) / noise_multiplier

    def excess(eps: float) -> float:
        return float(norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu)) - delta

    return float(brentq(excess, 0.0, 500.0, xtol=1e-10))


def _last_round(db: Path) -> int:
    if not db.exists():
        return -1
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as raw:
            (last,) = raw.execute("SELECT COALESCE(MAX(round), -1) FROM rounds").fetchone()
        return int(last)
    except sqlite3.OperationalError:  # the schema is being created
        return -1


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "again"), [("system", True), ("run", False)])
def test_rounds_written_after_the_checkpoint_and_trained_again_are_accounted_twice(
    tmp_path: Path, seed: str, again: bool
) -> None:
    privacy = {"kind": "central", "clip": 1.0, "noise_multiplier": Z, "delta": DELTA, "accountant": "pld"}
    clock = {"kind": "trace", "trace": {"synthetic": {"clients": 10}}, "over_select": 2}
    tree = tiny_config(
        rounds=ROUNDS, format=2, eval_every=0, clock=clock, checkpoint={"every": 10}, tracking=["csv", "tensorboard"]
    )
    tree["privacy"] = {**privacy, "noise_seed": seed}
    tree["model"] = {"kind": "cnn", "norm": "group"}  # rounds slow enough to stop between two checkpoints
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tree))
    out, db = tmp_path / "out", tmp_path / "fedsim.db"
    argv = [sys.executable, "-m", "fedsim.cli", "run", str(config), "--out", str(out), "--db", str(db)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while _last_round(db) < 12:  # three rounds past the checkpoint after round 9 (ckpt-000009)
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    newest = sorted(p.name for p in (out / "checkpoints").iterdir() if p.name.startswith("ckpt-"))[-1]
    checkpointed = int(newest.removeprefix("ckpt-"))
    written = _last_round(db) - checkpointed  # rounds released after the checkpoint, before the kill
    assert written >= 1

    resumed = subprocess.run(
        [sys.executable, "-m", "fedsim.cli", "resume", str(out), "--db", str(db)], capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    spent = json.loads((out / "summary.json").read_text())["privacy"]
    released = ROUNDS + (written if again else 0)
    assert spent["sampling"] == "unsampled" and spent["sensitivity"] == 1.0
    assert spent["released_again"] == (written if again else 0)
    assert spent["epsilon"] == pytest.approx(gaussian_epsilon(released, Z, DELTA), rel=2e-3)
    if again:  # and more than the run would have spent had it not crashed
        assert spent["epsilon"] > gaussian_epsilon(ROUNDS, Z, DELTA) * 1.01
    # the trackers: each round once (the interrupted run's rounds after the checkpoint purged), and the epsilon
    # they show at each round counts what had been released by then, the rounds released before the crash too
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (events,) = {p.parent for p in out.rglob("events.out.tfevents.*")}
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    shown = accumulator.Scalars("epsilon")
    assert [e.step for e in shown] == list(range(1, ROUNDS + 1))
    assert shown[-1].value == pytest.approx(spent["epsilon"], rel=1e-6)
    lines = (out / "metrics.csv").read_text().splitlines()
    assert [int(line.split(",")[0]) for line in lines[1:]] == list(range(1, ROUNDS + 1))
    resumed_round = checkpointed + 2  # the first round the resumed run released (1-based steps)
    by_then = resumed_round + (written if again else 0)  # rounds checkpointed+1.. were released once before
    assert shown[resumed_round - 1].value == pytest.approx(gaussian_epsilon(by_then, Z, DELTA), rel=2e-3)


def test_a_round_released_again_before_it_is_trained_again_still_counts(tmp_path: Path) -> None:
    """After a resume from round 4's checkpoint with rounds 5-7 released before the crash: at 6 rounds of the
    new timeline, rounds 0-4 were released once, round 5 twice, and rounds 6 and 7 once (before the crash)."""
    from fedsim.privacy.accountant import EpsilonCurve

    curve = EpsilonCurve(Accounting("central", "pld", "unsampled", 10, 10, DELTA), Z)
    curve.released_before = {5: 1, 6: 1, 7: 1}
    assert curve.releases(6) == {1: 7, 2: 1}
    assert curve.releases(8) == {2: 3, 1: 5}
    assert curve(8) == pytest.approx(gaussian_epsilon(8 + 3, Z, DELTA), rel=2e-3)
    assert curve(6) == pytest.approx(gaussian_epsilon(7 + 2, Z, DELTA), rel=2e-3)
