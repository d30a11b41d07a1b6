"""The server's half of a round is a list of registered steps whose order comes from their declarations
(fedsim.sim.rounds.steps): a new step is one class that says where it goes, its plan line and what it does,
and the plan, the synchronous round and FedBuff's server step all pick it up."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from fedsim.config import parse_config
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.plan import round_plan
from fedsim.sim.rounds.planned import PlannedStage, PlanSettings
from fedsim.sim.rounds.steps import RunParts, ServerRound, Step, register_step, server_steps
from fedsim.sim.rounds.steps import base as steps_base
from fedsim.sim.rounds.steps.base import ordered
from tests.conftest import tiny_config


def _step(name: str, after: tuple[str, ...] = (), before: tuple[str, ...] = ()) -> type[Step]:
    return type(name, (Step,), {"name": name, "after": after, "before": before})


def test_the_order_is_derived_from_the_declarations_not_from_where_a_step_is_written() -> None:
    steps = {s.name: s for s in (_step("c", after=("b",)), _step("a", before=("b",)), _step("b"), _step("d"))}
    assert [s.name for s in ordered(steps)] == ["a", "b", "c", "d"]  # a, b, c by declaration; d free: by name
    with pytest.raises(ValueError, match="'c' is ordered against 'x', which is not a step"):
        ordered({"c": _step("c", after=("x",))})
    with pytest.raises(ValueError, match="cycle: a, b"):
        ordered({"a": _step("a", after=("b",)), "b": _step("b", after=("a",))})


def test_the_built_in_steps_declare_the_papers_order() -> None:
    assert [s.name for s in server_steps()] == [
        "attack_finish",
        "all_reduce",
        "secagg_unmask",
        "before_rule",
        "aggregator",
        "dp_release",
        "after_release",
        "server_update",
        "leaders",
        "after_update",
        "finite_model",
        "downlink",
        "control",
    ]


CALLS: list[tuple[int, bool]] = []  # (round, whether DP had released when the step ran)


@dataclass(frozen=True)
class ReleasedNorm(Step):
    """A new built-in step, written as one file would be: after DP's release, before your after-release stages;
    it records the round it ran in."""

    name: ClassVar[str] = "released_norm"
    after: ClassVar[tuple[str, ...]] = ("dp_release",)
    before: ClassVar[tuple[str, ...]] = ("after_release",)

    @classmethod
    def planned(cls, cfg: PlanSettings) -> list[PlannedStage]:
        return [PlannedStage("released_norm", "server", "norm", {})] if cfg.privacy.central else []

    @classmethod
    def build(cls, run: RunParts) -> ReleasedNorm | None:
        return cls() if run.privacy is not None and run.privacy.central else None

    def apply_(self, at: ServerRound) -> None:
        CALLS.append((at.index, at.released))


@pytest.fixture
def released_norm() -> Iterator[type[Step]]:
    register_step(ReleasedNorm)
    CALLS.clear()
    try:
        yield ReleasedNorm
    finally:
        del steps_base._REGISTERED[ReleasedNorm.name]


def test_a_new_step_is_one_class_the_plan_the_round_and_the_summary_pick_up(
    released_norm: type[Step], tmp_path: Path
) -> None:
    private = {"kind": "central", "clip": 0.5, "noise_multiplier": 0.8}
    cfg = parse_config(tiny_config(rounds=2, clients_per_round=10, privacy=private))
    planned = [s.stage for s in round_plan(cfg) if s.side == "server"]
    assert planned[planned.index("dp_release") + 1] == "released_norm"
    assert planned[planned.index("released_norm") + 1] == "server_update"
    engine = Engine(cfg, out_dir=tmp_path / "out", db_path=tmp_path / "runs.db")
    engine.run()
    assert CALLS == [(0, True), (1, True)]  # once a round, 0-based, after DP's release as declared
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert "released_norm" in [s["stage"] for s in summary["stages"]]
    plain = parse_config(tiny_config(rounds=1))
    assert "released_norm" not in [s.stage for s in round_plan(plain)]  # a run without DP has no such step


def test_fedbuff_runs_the_same_steps_as_the_synchronous_round(released_norm: type[Step], tmp_path: Path) -> None:
    from fedsim.asynchronous.engine import AsyncEngine

    private = {"kind": "central", "clip": 0.5, "noise_multiplier": 0.8}
    trace = {"kind": "trace", "trace": {"synthetic": {"clients": 20}}}
    buffered = {"kind": "fedbuff", "concurrency": 6, "buffer": 4}
    tree = tiny_config(rounds=2, privacy=private, clock=trace, asynchronous=buffered, format=2)
    tree["clients_per_round"] = None
    cfg = parse_config(tree)
    engine = AsyncEngine(cfg, out_dir=tmp_path / "out", db_path=tmp_path / "runs.db")
    assert [type(s).__name__ for s in engine.steps][-4:] == ["DpRelease", "ReleasedNorm", "ServerUpdate", "FiniteModel"]
    engine.run()
    assert CALLS == [(0, True), (1, True)]  # each server step, after its buffer's release
