"""Shared fixtures: small real runs of the engine in a temporary directory."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from torch import Tensor

from fedsim.config import RunConfig, parse_config
from fedsim.data.base import FederatedDataset
from fedsim.privacy.context import PrivacyContext
from fedsim.privacy.dp import DifferentialPrivacy
from fedsim.sim.rounds.engine import Engine
from tests.split_fixtures import encoder, onnx_bottom, pretrained, sst2_dir  # noqa: F401  (fixtures)

RunFactory = Callable[..., Engine]
QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart.yaml"


def killed_once_saved(cmd: Sequence[str], checkpoint: Path, limit_s: float = 60.0) -> None:
    """Start ``cmd`` and SIGKILL it as soon as the directory ``checkpoint`` exists (polled, not waited a fixed
    time); fails if the run ends first or takes past ``limit_s``, and checks it died of the kill."""
    proc = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + limit_s
    while not checkpoint.is_dir():
        assert proc.poll() is None and time.monotonic() < deadline, f"the run ended before {checkpoint.name}"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL


def load_module(name: str, path: Path) -> ModuleType:
    """The Python file at ``path`` imported as module ``name`` (a bench script, an example: what is not a package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def wait_until(check: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` once ``timeout`` seconds pass. A test waits for a
    condition this way, never for a fixed time."""
    import time

    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.02)


def private_stage(cfg: RunConfig, population: int, initial: Tensor | None = None) -> DifferentialPrivacy:
    """The DP stage a run of ``cfg`` over ``population`` clients builds (its section and its context)."""
    context = PrivacyContext(cfg.seed, population, cfg.cohort_size, cfg.sampling, cfg.rounds)
    return DifferentialPrivacy(cfg.privacy, context, initial)


def run_example(script: str, cwd: Path) -> list[str]:
    """``python examples/SCRIPT`` in ``cwd`` as a user runs it: asserts it exits 0, returns its stdout lines."""
    import subprocess
    import sys

    path = QUICKSTART.parent / script
    done = subprocess.run([sys.executable, str(path)], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], settings: Sequence[str]) -> str:
    """``fedsim run`` of the quickstart with ``--set`` each of ``settings``: asserts it exits 2 with one line on
    stderr and writes nothing; returns that line."""
    from fedsim.cli import main

    args = [part for setting in settings for part in ("--set", setting)]
    out, db = tmp_path / "o", tmp_path / "runs.db"
    with pytest.raises(SystemExit) as exit_:
        main(["run", str(QUICKSTART), *args, "--out", str(out), "--db", str(db)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert err.count("\n") == 1, err
    assert not out.exists() and not db.exists()
    return err


def on_one_and_two_ranks(tree: dict[str, Any], tmp_path: Path) -> tuple[Tensor, Tensor]:
    """The final weights of ``tree`` on two devices (even scheduling), run by one rank and by two."""
    from fedsim.api.launch import execute, final_weights

    cfg = parse_config({**tree, "devices": 2, "scheduler": {"kind": "even"}})
    for ranks in (1, 2):
        execute(cfg, tmp_path / f"ranks{ranks}", tmp_path / f"{ranks}.db", ranks=ranks)
    return final_weights(tmp_path / "ranks1"), final_weights(tmp_path / "ranks2")


SERVER_OPTIMIZERS = {"fedavgm": {"kind": "sgd", "momentum": 0.9}}  # a name for a setting, as the papers say


def with_server(name: str) -> dict[str, Any]:
    """Overrides for ``tiny_config`` from ``algorithm+optimiser`` (``fedavg+fedadam``, ``scaffold+adam``,
    ``fedavg+fedavgm``: sgd with momentum 0.9) or an algorithm's name alone."""
    algorithm, _, optimizer = name.partition("+")
    server = {"server_optimizer": SERVER_OPTIMIZERS.get(optimizer, {"kind": optimizer})} if optimizer else {}
    return {"algorithm__kind": algorithm, **server}


def tiny_config(**overrides: Any) -> dict[str, Any]:
    """A run small enough for a unit test: 10 digits clients, logistic regression, 3 rounds."""
    tree: dict[str, Any] = {
        "name": "test",
        "seed": 0,
        "rounds": 3,
        "clients_per_round": 5,
        "eval_every": 1,
        "progress": False,
        "data": {"dataset": "digits", "clients": 10, "partition": {"kind": "dirichlet", "alpha": 0.5}},
        "model": {"kind": "logistic"},
        "algorithm": {"kind": "fedavg", "lr": 0.1, "batch_size": 16},
    }
    for key, value in overrides.items():
        node = tree
        parts = key.split("__")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return tree


@pytest.fixture
def run_engine(tmp_path: Path) -> RunFactory:
    """Run a config tree to completion in its own directory and return the finished engine."""
    counter = iter(range(1000))

    def factory(tree: dict[str, Any], dataset: FederatedDataset | None = None) -> Engine:
        workdir = tmp_path / f"run{next(counter)}"
        engine = Engine(parse_config(tree), out_dir=workdir, db_path=workdir / "fedsim.db", dataset=dataset)
        engine.run()
        return engine

    return factory


def summed_row_norms(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A list that fills, as the engine runs, with the L2 norm of every client ``delta`` row added into a
    rank's sum: what the server sums, after every client-side stage."""
    import torch

    from fedsim.sim.rounds.upload import SumBuffer

    norms: list[float] = []
    add = SumBuffer.add_rows_

    def recording(self: SumBuffer, rows: Any, coefficients: Any) -> None:
        norms.extend(torch.linalg.vector_norm(rows["delta"], dim=1).tolist())
        add(self, rows, coefficients)

    monkeypatch.setattr(SumBuffer, "add_rows_", recording)
    return norms
