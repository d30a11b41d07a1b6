"""A ``Simulation`` script under torchrun is the pool: its ranks join torchrun's group and split each round's
clients, rank 0 writing the one run (before, each rank ran the whole simulation on its own, and the second
picked out/NAME-2). Checked against the same config as one process, weights within float summation order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from fedsim.api.launch import execute, final_weights
from fedsim.config import parse_config
from tests.conftest import tiny_config

SCRIPT = """
import json, sys
import torch.distributed as dist
from fedsim import Simulation

rounds = []
sim = Simulation(sys.argv[1], callbacks=[lambda sim, result: rounds.append(result.round)], db="fedsim.db")
sim.run()
print(json.dumps({"rank": dist.get_rank(), "world": dist.get_world_size(), "out": str(sim.out), "rounds": rounds}))
"""


@pytest.mark.slow
def test_a_simulation_script_under_torchrun_trains_one_run_on_the_ranks(tmp_path: Path) -> None:
    tree = tiny_config(rounds=3, clients_per_round=6, threads=1, devices=2, eval_every=0)
    tree["scheduler"] = {"kind": "even"}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(tree))
    (tmp_path / "script.py").write_text(textwrap.dedent(SCRIPT))
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [*torchrun, "script.py", "run.yaml"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = sorted((json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")), key=str)
    assert [(s["rank"], s["world"], s["out"]) for s in said] == [(0, 2, "out/test"), (1, 2, "out/test")]
    assert said[0]["rounds"] == [1, 2, 3]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["test"]  # one run, not one a rank
    summary = json.loads((tmp_path / "out" / "test" / "summary.json").read_text())
    assert summary["devices"] == 2 and summary["rounds"] == 3
    one = tmp_path / "one"
    execute(parse_config(tree), one, tmp_path / "one.db", ranks=1)
    torch.testing.assert_close(final_weights(tmp_path / "out" / "test"), final_weights(one), rtol=0, atol=1e-5)
