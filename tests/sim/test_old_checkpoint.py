"""A checkpoint written before the saved-state container (by e047747's code: SCAFFOLD's client states and
server variate, FedAdam's moments, Oort's reports, the runtime model, the ledger) resumes under today's code to
the weights today's uninterrupted run ends on, bit for bit.

tests/sim/fixtures/checkpoint_e047747 is that run's output directory after its round-4 checkpoint (6 rounds,
``run.yaml``; `fedsim run run.yaml` at e047747, the later checkpoint and the outputs left out)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from fedsim.api.launch import final_weights

FIXTURE = Path(__file__).parent / "fixtures" / "checkpoint_e047747"


def _fedsim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fedsim.cli", *args], capture_output=True, text=True, check=False)


def test_a_checkpoint_of_the_old_layout_resumes_to_todays_uninterrupted_weights(tmp_path: Path) -> None:
    old = tmp_path / "old"
    shutil.copytree(FIXTURE, old)
    meta = json.loads((old / "checkpoints" / "ckpt-000003" / "meta.json").read_text())
    assert "model" not in meta and "runtime" in meta  # written before the container's entries
    db = str(tmp_path / "fedsim.db")
    resumed = _fedsim("resume", str(old), "--db", db)
    assert resumed.returncode == 0, resumed.stderr
    straight = _fedsim("run", str(old / "run.yaml"), "--out", str(tmp_path / "straight"), "--db", db)
    assert straight.returncode == 0, straight.stderr
    assert torch.equal(final_weights(old), final_weights(tmp_path / "straight"))
    rounds = json.loads((old / "summary.json").read_text())["rounds"]
    assert rounds == 6
