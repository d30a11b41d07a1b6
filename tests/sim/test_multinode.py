"""Two torchrun "nodes" on one host: each node is its own torchrun with its own working directory, as two
machines would be. With one shared state directory they give the single process's weights; with a state
directory each (what two machines without a shared filesystem have) every rank stops with one line."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from fedsim.api.launch import execute, final_weights
from fedsim.config import parse_config
from tests.conftest import tiny_config


def _config(tmp_path: Path, **overrides: Any) -> Path:
    tree = tiny_config(rounds=3, clients_per_round=6, threads=1, devices=2, algorithm__kind="scaffold", **overrides)
    tree["scheduler"] = {"kind": "even"}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _two_nodes(tmp_path: Path, config: Path) -> list[subprocess.CompletedProcess[str]]:
    """Start node 0 and node 1 (one rank each) and wait for both; each runs in a directory of its own and
    writes its run under its own ``out`` and ``fedsim.db`` there."""
    port = str(_free_port())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    nodes = []
    for node in (0, 1):
        cwd = tmp_path / f"node{node}"
        cwd.mkdir()
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node)]
        torchrun += ["--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port]
        fedsim = ["-m", "fedsim.cli", "run", str(config), "--out", "out", "--db", "fedsim.db"]
        nodes.append(subprocess.Popen(torchrun + fedsim, cwd=cwd, env=env, text=True, stderr=subprocess.PIPE))
    done = []
    for proc in nodes:
        _, err = proc.communicate(timeout=240)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, "", err))
    return done


@pytest.mark.slow
def test_two_nodes_sharing_the_state_directory_give_the_single_process_weights(tmp_path: Path) -> None:
    shared = tmp_path / "shared-state"
    config = _config(tmp_path, state={"backend": "disk", "dir": str(shared)})
    for node in _two_nodes(tmp_path, config):
        assert node.returncode == 0, node.stderr[-2000:]
    two = tmp_path / "node0" / "out"
    assert json.loads((two / "summary.json").read_text())["devices"] == 2
    assert not (tmp_path / "node1" / "out" / "summary.json").exists()  # rank 0 alone writes the run
    assert not list(shared.glob(".fedsim-shared-*"))  # the token is gone
    tree = yaml.safe_load(config.read_text())
    tree["state"]["dir"] = str(tmp_path / "one-state")
    one = tmp_path / "one"
    execute(parse_config(tree), one, tmp_path / "one.db", ranks=1)
    torch.testing.assert_close(final_weights(two), final_weights(one), rtol=0, atol=1e-5)


@pytest.mark.slow
def test_two_nodes_with_a_state_directory_each_stop_with_one_line_and_exit_2(tmp_path: Path) -> None:
    config = _config(tmp_path, state={"backend": "disk"})  # out/state: relative, one per node's directory
    for node in _two_nodes(tmp_path, config):
        assert node.returncode != 0
        ours = [line for line in node.stderr.splitlines() if line.startswith("fedsim: error:")]
        assert len(ours) == 1, node.stderr[-3000:]
        assert "state.dir: rank 1 of 2 cannot see rank 0's directory" in ours[0]
        assert str((tmp_path / "node0" / "out" / "state").resolve()) in ours[0]
        assert "state.backend=memory" in ours[0]
        assert "exitcode  : 2" in node.stderr  # torchrun's report of the rank it ran
        assert "fedsim/sim" not in node.stderr, node.stderr[-3000:]  # torchrun reports with a traceback of its own
    assert not (tmp_path / "node0" / "fedsim.db").exists()  # refused before the run store was touched
    assert not list((tmp_path / "node0" / "out" / "state").glob(".fedsim-shared-*"))
