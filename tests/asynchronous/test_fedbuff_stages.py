"""FedBuff composed with the round's stages: a rule over the buffer's rows (numpy's median as the reference),
central DP on the buffer's sum (its noise measured, its epsilon against the closed form of composed Gaussians,
each client at most once in a buffer), an attack and a compressor on the clients' side; each resumes exactly.
The synchronous round on the trace is accounted the same way (no amplification by sampling)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from scipy.optimize import brentq
from scipy.stats import norm

from fedsim.api.launch import final_weights
from fedsim.asynchronous.engine import AsyncEngine
from fedsim.config import parse_config
from fedsim.runstore import RunStore
from tests.asynchronous.test_async_runs import _engine, _events, _tree
from tests.conftest import killed_once_saved, on_one_and_two_ranks
from tests.traces.test_traces import five

CENTRAL = {"kind": "central", "clip": 1.0, "noise_multiplier": 2.0, "accountant": "pld"}


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "five.npz"
    five().save(path)
    return path


def composed_gaussian_epsilon(noise_multiplier: float, releases: int, delta: float) -> float:
    """Epsilon at ``delta`` of ``releases`` Gaussian releases of sensitivity 1 and noise ``noise_multiplier``,
    none sampled: one Gaussian of mu = sqrt(releases) / z (Dong, Roth and Su's GDP composition), whose exact
    curve is Balle and Wang's (ICML 2018, Theorem 8): delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)."""
    mu = math.sqrt(releases) / noise_multiplier

    def excess(eps: float) -> float:
        return float(norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu)) - delta

    return float(brentq(excess, 0.0, 500.0, xtol=1e-10))


def _applied(db: Path) -> list[list[int]]:
    """Each step's arrivals, by client."""
    with RunStore.open_readonly(db) as store:
        (run,) = store.list_runs()
        return [[a[0] for a in json.loads(r.metrics_json)["applied"]] for r in store.rounds(run.run_id)]


def test_fedbuff_with_central_dp_is_accounted_as_unsampled_gaussians(tmp_path: Path, trace: Path) -> None:
    tree = _tree(trace, rounds=6, privacy=CENTRAL, asynchronous={"kind": "fedbuff", "concurrency": 4, "buffer": 2})
    engine = _engine(tree, tmp_path / "dp", tmp_path / "dp.db")
    engine.run()
    privacy = json.loads((tmp_path / "dp" / "summary.json").read_text())["privacy"]
    assert privacy["sampling"] == "unsampled" and privacy["sampling_rate"] == 1.0
    assert privacy["neighbours"] == "zero-out-one" and privacy["sensitivity"] == 1.0
    assert privacy["trained_cohort"] == 2 and privacy["rounds"] == 6  # the buffer: each step's denominator
    expected = composed_gaussian_epsilon(2.0, 6, 1e-5)
    assert privacy["epsilon"] == pytest.approx(expected, rel=2e-3), (privacy["epsilon"], expected)
    for step in _applied(tmp_path / "dp.db"):  # one update of a client per release: what sensitivity 1 needs
        assert len(step) == 2 and len(set(step)) == 2, step


def test_without_dp_a_client_may_arrive_twice_in_one_buffer(tmp_path: Path, trace: Path) -> None:
    """The rule DP's accounting adds is not vacuous: on this trace, without it, one client fills two places of
    a buffer (client 1 is always online and fast enough to finish twice before the buffer fills)."""
    tree = _tree(trace, rounds=6, asynchronous={"kind": "fedbuff", "concurrency": 4, "buffer": 3})
    _engine(tree, tmp_path / "plain", tmp_path / "plain.db").run()
    assert any(len(set(step)) < len(step) for step in _applied(tmp_path / "plain.db"))
    held = {**tree, "privacy": CENTRAL}
    _engine(held, tmp_path / "held", tmp_path / "held.db").run()
    assert all(len(set(step)) == len(step) for step in _applied(tmp_path / "held.db"))


def test_the_release_adds_noise_of_z_clips_over_the_buffer(tmp_path: Path, trace: Path) -> None:
    """A step whose buffer sums to zero moves the model by the noise alone, over the buffer's fixed size: its
    standard deviation is z * C / K (server learning rate 1)."""
    privacy = {**CENTRAL, "noise_multiplier": 3.0, "clip": 0.5}
    tree = _tree(trace, privacy=privacy, asynchronous={"kind": "fedbuff", "concurrency": 3, "buffer": 4})
    engine = AsyncEngine(parse_config(tree), tmp_path / "n", tmp_path / "n.db")
    before = engine.global_state.clone()
    sums = {"delta": torch.zeros_like(before), "weight": torch.tensor(0.0, dtype=torch.float64)}
    engine._apply(sums)
    moved = (engine.global_state - before).double()
    assert abs(float(moved.mean())) < 4 * 3.0 * 0.5 / 4 / math.sqrt(moved.numel())
    assert float(moved.std()) == pytest.approx(3.0 * 0.5 / 4, rel=0.1)  # 650 draws: within 10%


def test_a_rule_over_the_buffer_takes_the_median_of_its_rows(tmp_path: Path, trace: Path) -> None:
    tree = _tree(trace, aggregator={"kind": "median"}, asynchronous={"kind": "fedbuff", "concurrency": 3, "buffer": 3})
    engine = AsyncEngine(parse_config(tree), tmp_path / "m", tmp_path / "m.db")
    buffer = engine.server.buffer
    assert buffer is not None and buffer.rows is not None
    rng = np.random.default_rng(7)
    rows = rng.normal(size=(3, engine.global_state.numel())).astype(np.float32)
    for row in rows:  # three arrivals, staleness weight 0.5 each, aggregation weights 10, 20, 30
        buffer.add_(torch.from_numpy(row), 10.0 * (buffer.count + 1), 0.5)
    before = engine.global_state.clone()
    engine._apply(buffer.sums())
    expected = np.median(0.5 * rows, axis=0)  # the rule's aggregate, the server's sgd at learning rate 1
    np.testing.assert_allclose((engine.global_state - before).numpy(), expected, rtol=0, atol=1e-6)


def test_an_attack_and_a_compressor_run_on_the_clients_of_a_buffer(tmp_path: Path, trace: Path) -> None:
    base = _tree(trace, rounds=6, asynchronous={"kind": "fedbuff", "concurrency": 4, "buffer": 2})
    flipped = {**base, "attack": {"kind": "sign_flip", "fraction": 0.3}}
    sparse = {**base, "uplink": {"kind": "topk", "fraction": 0.1}}
    for name, tree in (("base", base), ("flipped", flipped), ("sparse", sparse)):
        _engine(tree, tmp_path / name, tmp_path / f"{name}.db").run()
    summary = {n: json.loads((tmp_path / n / "summary.json").read_text()) for n in ("base", "flipped", "sparse")}
    assert summary["flipped"]["attack"]["malicious_turns"] > 0
    assert not torch.equal(final_weights(tmp_path / "flipped"), final_weights(tmp_path / "base"))
    assert [e[2] for e in _events(tmp_path / "flipped.db")] == [e[2] for e in _events(tmp_path / "base.db")]
    # top-10% sends about a fifth of the dense bytes (an index and a value for each kept entry)
    ratio = summary["sparse"]["bytes_up"] / summary["base"]["bytes_up"]
    assert 0.1 < ratio < 0.3, ratio


@pytest.mark.parametrize(
    "stages",
    [{"privacy": CENTRAL}, {"aggregator": {"kind": "median"}}, {"uplink": {"kind": "topk", "fraction": 0.1}}],
    ids=["dp", "median", "topk"],
)
def test_fedbuff_with_a_stage_resumes_to_the_same_weights_and_event_log(
    tmp_path: Path, trace: Path, stages: dict[str, Any]
) -> None:
    tree = _tree(trace, checkpoint={"every": 2}, asynchronous={"kind": "fedbuff", "concurrency": 4, "buffer": 3})
    tree.update(stages)
    _engine(tree, tmp_path / "whole", tmp_path / "whole.db").run()
    cut = _engine(tree, tmp_path / "cut", tmp_path / "cut.db")
    cut.run(after_round=lambda row: row.round == 3)  # a checkpoint after step 1 (0-based), results in flight
    _engine(tree, tmp_path / "cut", tmp_path / "cut.db", resume=True).run()
    assert torch.equal(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"))
    assert _events(tmp_path / "cut.db") == _events(tmp_path / "whole.db")


def test_a_synchronous_round_on_the_trace_is_accounted_unsampled(tmp_path: Path, trace: Path) -> None:
    tree = _tree(trace, "sync", rounds=4, privacy=CENTRAL)
    _engine(tree, tmp_path / "s", tmp_path / "s.db").run()
    privacy = json.loads((tmp_path / "s" / "summary.json").read_text())["privacy"]
    assert privacy["sampling"] == "unsampled" and privacy["trained_cohort"] == 2
    assert privacy["epsilon"] == pytest.approx(composed_gaussian_epsilon(2.0, 4, 1e-5), rel=2e-3)


@pytest.mark.slow
@pytest.mark.parametrize("stages", [{"privacy": CENTRAL}, {"aggregator": {"kind": "median"}}], ids=["dp", "median"])
def test_fedbuff_with_a_stage_killed_and_resumed_ends_on_the_uninterrupted_weights(
    tmp_path: Path, trace: Path, stages: dict[str, Any]
) -> None:
    tree = _tree(trace, rounds=40, checkpoint={"every": 2}, model={"kind": "cnn", "norm": "group"}, **stages)
    tree["asynchronous"] = {"kind": "fedbuff", "concurrency": 4, "buffer": 3}
    config = tmp_path / "fedbuff.yaml"
    config.write_text(yaml.safe_dump(tree))
    db = str(tmp_path / "fedsim.db")
    fedsim = [sys.executable, "-m", "fedsim.cli"]
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    assert (
        subprocess.run([*fedsim, "run", str(config), "--out", str(straight), "--db", db], check=False).returncode == 0
    )
    run = [*fedsim, "run", str(config), "--out", str(crashed), "--db", db]
    killed_once_saved(run, crashed / "checkpoints" / "ckpt-000005", limit_s=120)  # its 3rd checkpoint
    assert not (crashed / "summary.json").exists()
    resumed = subprocess.run([*fedsim, "resume", str(crashed), "--db", db], capture_output=True, text=True, check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert torch.equal(final_weights(crashed), final_weights(straight))


@pytest.mark.slow
@pytest.mark.parametrize("stages", [{"privacy": CENTRAL}, {"aggregator": {"kind": "median"}}], ids=["dp", "median"])
def test_fedbuff_with_a_stage_on_two_ranks_gives_one_ranks_weights_and_event_log(
    tmp_path: Path, trace: Path, stages: dict[str, Any]
) -> None:
    """Task k trains on rank k % 2; the buffer's sum and (for the rule) its rows are summed across the ranks at
    the step, and DP's noise is keyed by the step, so two ranks add the same noise to the same sum: within
    float summation order of one rank's."""
    tree = _tree(trace, asynchronous={"kind": "fedbuff", "concurrency": 4, "buffer": 3}, **stages)
    one, two = on_one_and_two_ranks(tree, tmp_path)
    torch.testing.assert_close(two, one, rtol=0, atol=2e-5)
    assert _events(tmp_path / "2.db") == _events(tmp_path / "1.db")
