"""An algorithm of your own named from YAML with factory: examples/own_algorithm.py's FedExP against its
paper's step size computed here from the clients' updates, run sequential and fused, from YAML and Python."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from fedsim.algorithms.base import ClientContext
from fedsim.algorithms.group import train_one
from fedsim.config import ConfigError, load_config, parse_config
from fedsim.data import build_dataset
from fedsim.models import Replica, build_model
from fedsim.sim.rounds.engine import Engine
from tests.conftest import run_example, tiny_config

ROOT = Path(__file__).resolve().parents[2]
FEDEXP = {"factory": "examples/own_algorithm.py:FedExP", "lr": 0.1, "local_steps": 3}


def test_fedexp_steps_by_its_papers_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three clients trained one by one; eta = max(1, mean ||Delta_i||^2 / (2 (||mean Delta||^2 + eps))) and
    the step eta * mean Delta, from the deltas themselves (uniform weights, as the paper)."""
    monkeypatch.chdir(ROOT)
    cfg = parse_config(tiny_config(algorithm=FEDEXP | {"weighting": "uniform"}))
    assert cfg.algorithm.kind == "fedexp"
    dataset = build_dataset(cfg.data, 0)
    replica = Replica(build_model(cfg.model, dataset.input_shape, dataset.num_classes, 0))
    from fedsim.algorithms import build_algorithm

    algorithm = build_algorithm(cfg.algorithm, dataset.num_clients)
    start = replica.flat.clone()
    sums = {"delta": torch.zeros_like(start), "sqnorm": torch.zeros(1), "weight": torch.zeros(1)}
    deltas = []
    for cid in range(3):
        replica.load_(start)
        ctx = ClientContext(cid, 0, start, 1.0, torch.Generator().manual_seed(cid))
        updates, _ = train_one(algorithm, replica, dataset.client(cid), None, ctx)
        for name, total in updates.sums().items():
            sums[name] += total.reshape(sums[name].shape)
        sums["weight"] += 1.0
        deltas.append(updates.rows["delta"][0].clone())
    n = replica.n_params
    mean = torch.stack(deltas).mean(0)
    spread = sum(float(d[:n] @ d[:n]) for d in deltas) / 3
    eta = max(1.0, spread / (2 * (float(mean[:n] @ mean[:n]) + 1e-3)))
    update = algorithm.server_update(start, sums, n)
    assert update is not None and update.factor == pytest.approx(eta, rel=1e-5) and eta > 1
    torch.testing.assert_close(update.mean(), eta * mean, rtol=1e-5, atol=1e-7)


def test_fedexp_runs_from_yaml_fused_as_sequential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    cfg = load_config("examples/own_algorithm.yaml", ["rounds=3", "progress=false"])
    assert cfg.algorithm.kind == "fedexp" and cfg.algorithm.factory == "examples/own_algorithm.py:FedExP"
    weights = {}
    for kind in ("sequential", "fused"):
        run = cfg.model_copy(update={"executor": cfg.executor.model_copy(update={"kind": kind, "clients": 3})})
        engine = Engine(run, tmp_path / kind, tmp_path / kind / "runs.db")
        engine.run()
        weights[kind] = engine.global_state
        assert engine.algorithm.eta >= 1.0  # type: ignore[attr-defined]
    torch.testing.assert_close(weights["fused"], weights["sequential"], rtol=0, atol=2e-5)


def test_a_factory_that_is_no_registered_algorithm_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    unregistered = "algorithm.factory: examples/own_selector.py:LeastServed is not a registered algorithm"
    with pytest.raises(ConfigError, match=re.escape(unregistered)):
        parse_config(tiny_config(algorithm={"factory": "examples/own_selector.py:LeastServed"}))
    renamed = "algorithm.kind=fedavg but examples/own_algorithm.py:FedExP is registered as 'fedexp'"
    with pytest.raises(ConfigError, match=re.escape(renamed)):
        parse_config(tiny_config(algorithm=FEDEXP | {"kind": "fedavg"}))


@pytest.mark.slow
def test_the_example_algorithm_runs_from_python(tmp_path: Path) -> None:
    assert [line.split(":")[0] for line in run_example("own_algorithm.py", tmp_path)] == ["fedavg", "fedexp"]
