"""A pool killed and resumed reports what the uninterrupted pool does, count for count: summary.json's bytes
(modelled and moved between ranks) and every round's clients with saved state, their bytes on disk and in rank
0's cache, read from the run store with sqlite3. Timings are the machine's and are not compared."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from fedsim.api.launch import final_weights
from tests.conftest import killed_once_saved, tiny_config

COUNTS = ("bytes_up", "bytes_down", "bytes_moved", "bytes_up_uncompressed", "rounds", "clients", "samples")


def _rows(db: Path, out: Path) -> list[tuple[int, ...]]:
    run_id = json.loads((out / "summary.json").read_text())["run_id"]
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT round, bytes_up, bytes_down, metrics_json FROM rounds WHERE run_id = ? ORDER BY round", (run_id,)
        ).fetchall()
    keys = ("state_clients", "state_disk_bytes", "state_memory_bytes")
    return [(r, up, down, *(json.loads(m)[k] for k in keys)) for r, up, down, m in rows]


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["lpt", "even"])
def test_a_killed_pool_resumes_to_the_same_weights_and_counts(tmp_path: Path, scheduler: str) -> None:
    """Two uninterrupted runs and a killed-and-resumed one end alike, under the default scheduler and the even
    split: plans that do not follow measured seconds (``learned`` does, and is not compared)."""
    tree = tiny_config(
        rounds=12,
        clients_per_round=6,
        devices=2,
        eval_every=5,
        scheduler={"kind": scheduler},
        checkpoint={"every": 2},
        state={"backend": "disk"},
        algorithm={"kind": "scaffold", "lr": 0.1, "batch_size": 16},
    )
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tree))
    db, straight, crashed = tmp_path / "fedsim.db", tmp_path / "straight", tmp_path / "crashed"
    fedsim = [sys.executable, "-m", "fedsim.cli"]
    for out in (straight, tmp_path / "again"):
        done = subprocess.run([*fedsim, "run", str(config), "--out", str(out), "--db", str(db)], check=False)
        assert done.returncode == 0
    killed = [*fedsim, "run", str(config), "--out", str(crashed), "--db", str(db)]
    killed_once_saved(killed, crashed / "checkpoints" / "ckpt-000003")
    resumed = subprocess.run([*fedsim, "resume", str(crashed), "--db", str(db)], capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    assert torch.equal(final_weights(tmp_path / "again"), final_weights(straight))
    assert torch.equal(final_weights(crashed), final_weights(straight))
    a, b = (json.loads((out / "summary.json").read_text()) for out in (straight, crashed))
    assert {k: a[k] for k in COUNTS} == {k: b[k] for k in COUNTS}
    assert a["bytes_moved"] > 0
    assert _rows(db, crashed) == _rows(db, straight)
