"""Shared fixtures: small real runs of the engine in a temporary directory."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fedsim.config import parse_config
from fedsim.data.base import FederatedDataset
from fedsim.sim.engine import Engine
from tests.split_fixtures import encoder, onnx_bottom, pretrained, sst2_dir  # noqa: F401  (fixtures)

RunFactory = Callable[..., Engine]


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
        "algorithm": {"name": "fedavg", "lr": 0.1, "batch_size": 16},
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
