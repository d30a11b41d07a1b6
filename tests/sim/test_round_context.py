"""A round's settings are a frozen context (fedsim.algorithms.base.RoundContext): a knob changes what the clients
train with, never the algorithm's ``cfg``, and a setting changed between rounds builds the algorithm anew with
its server state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim import Simulation
from fedsim.config import parse_config
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config


def _samples_per_client(db: Path) -> set[int]:
    with RunStore.open_readonly(db) as store:
        (run,) = store.list_runs()
        return {c.samples or 0 for c in store.client_runs(run.run_id)}


@pytest.mark.parametrize("executor", ["sequential", "fused"])
def test_a_local_steps_knob_trains_its_steps_and_leaves_the_algorithms_cfg(executor: str, tmp_path: Path) -> None:
    tree = tiny_config(
        algorithm__local_steps=1,
        algorithm__batch_size=8,
        executor={"kind": executor, "clients": 5},
        control={"kind": "none", "knob": {"name": "local_steps", "ladder": [1, 4], "start": 1}},
    )
    engine = Engine(parse_config(tree), tmp_path / "o", tmp_path / "r.db")
    engine.run()
    assert _samples_per_client(tmp_path / "r.db") == {4 * 8}  # the knob's four steps of eight samples
    assert engine.algorithm.cfg.local_steps == 1  # type: ignore[attr-defined]  # as configured, never written
    assert engine.opt.local_steps == 1


def test_a_changed_setting_keeps_the_servers_state(tmp_path: Path) -> None:
    """SCAFFOLD's control variate and FedAdam's moments go on through Simulation.set: changing a setting to its
    own value changes nothing."""
    tree = tiny_config(rounds=4, algorithm__kind="scaffold", server_optimizer={"kind": "fedadam", "lr": 0.05})

    def same_lr(sim: Simulation, row: Any) -> None:
        before = sim.engine.algorithm
        sim.set("lr", 0.1)
        assert sim.engine.algorithm is not before  # built anew, not written into

    plain = Simulation(tree, out=tmp_path / "plain", db=tmp_path / "plain.db")
    plain.run()
    reset = Simulation(tree, callbacks=[same_lr], out=tmp_path / "set", db=tmp_path / "set.db")
    reset.run()
    assert torch.equal(reset.engine.global_state, plain.engine.global_state)
