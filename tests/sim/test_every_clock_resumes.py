"""Every clock drives the same stages, and every one holds under a crash and across ranks: a run SIGKILLed once
its third checkpoint exists and resumed ends on the uninterrupted run's weights, bit for bit; the same config
on two ranks ends where one rank does (float summation order apart). The clocks: measured rounds (a gathering
rule and a server optimiser), trace rounds (Oort choosing among the clients online), FedBuff (central DP and a
per-client rule over the buffer) and gossip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from fedsim.api.launch import final_weights
from tests.conftest import killed_once_saved, on_one_and_two_ranks, tiny_config

TRACE = {"kind": "trace", "trace": {"synthetic": {"clients": 10}}}
CLOCKS: dict[str, dict[str, Any]] = {
    "rounds": {"aggregator": {"kind": "median"}, "server_optimizer": {"kind": "fedadam", "lr": 0.02}},
    "trace": {"clock": {**TRACE, "over_select": 2}, "selection": {"kind": "oort"}},
    "fedbuff": {
        "clients_per_round": None,
        "clock": TRACE,
        "asynchronous": {"kind": "fedbuff", "concurrency": 4, "buffer": 3},
        "privacy": {"kind": "central", "clip": 1.0, "noise_multiplier": 1.0},
        "aggregator": {"kind": "norm_bound", "bound": 0.5},
    },
    "gossip": {"clients_per_round": None, "algorithm": {"kind": "dpsgd", "lr": 0.1}, "topology": {"kind": "ring"}},
}


def _tree(clock: str, **overrides: Any) -> dict[str, Any]:
    return tiny_config(**{"format": 2, "eval_every": 5, **CLOCKS[clock], **overrides})


@pytest.mark.slow
@pytest.mark.parametrize("clock", sorted(CLOCKS))
def test_a_killed_run_resumes_to_the_uninterrupted_weights(tmp_path: Path, clock: str) -> None:
    config = tmp_path / f"{clock}.yaml"
    config.write_text(yaml.safe_dump(_tree(clock, rounds=40, checkpoint={"every": 2})))
    db = str(tmp_path / "fedsim.db")
    fedsim = [sys.executable, "-m", "fedsim.cli"]
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    done = subprocess.run([*fedsim, "run", str(config), "--out", str(straight), "--db", db], check=False)
    assert done.returncode == 0
    killed_once_saved(
        [*fedsim, "run", str(config), "--out", str(crashed), "--db", db], crashed / "checkpoints" / "ckpt-000005"
    )
    assert not (crashed / "summary.json").exists()
    resumed = subprocess.run([*fedsim, "resume", str(crashed), "--db", db], capture_output=True, text=True, check=False)
    assert resumed.returncode == 0, resumed.stderr
    assert torch.equal(final_weights(crashed), final_weights(straight))


@pytest.mark.slow
@pytest.mark.parametrize("clock", sorted(CLOCKS))
def test_two_ranks_end_where_one_rank_does(tmp_path: Path, clock: str) -> None:
    one, two = on_one_and_two_ranks(_tree(clock, rounds=6), tmp_path)
    assert not torch.equal(one, torch.zeros_like(one))
    torch.testing.assert_close(two, one, rtol=0, atol=2e-5)
