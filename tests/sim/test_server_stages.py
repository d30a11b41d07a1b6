"""Server stages of your own: run at their point, fail a round (the model stays), listed by the plan and
summary.json, kept by the checkpoint; examples/own_server_stage.py's norm guard from its own file."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pytest
import torch
from pydantic import Field
from torch import Tensor

from fedsim.config import ConfigError, ServerStageConfig, load_config, parse_config, register_server_stage
from fedsim.config.server_stage import SERVER_STAGES
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.plan import round_plan
from fedsim.sim.server_stages import ServerView, StageContext
from tests.conftest import run_example, tiny_config

ROOT = Path(__file__).resolve().parents[2]
SEEN: list[tuple[str, int, float]] = []  # (point, round, the view's model norm) as the probe saw them


class ProbeConfig(ServerStageConfig):
    kind: Literal["probe_stage"] = "probe_stage"
    fail_rounds: list[int] = Field(default_factory=list)


@register_server_stage(ProbeConfig)
class Probe:
    """Records where it ran and what it saw; fails the rounds it is told to."""

    def __init__(self, cfg: ProbeConfig, context: StageContext) -> None:
        self.cfg, self.calls = cfg, 0

    def begin_round(self, r: int, cohort: Sequence[int]) -> None:
        return None

    def apply_(self, view: ServerView) -> bool:
        self.calls += 1
        SEEN.append((self.cfg.at, view.round, float(view.model.norm())))
        return view.round in self.cfg.fail_rounds

    def round_metrics(self) -> dict[str, float]:
        return {"calls": float(self.calls)}

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def tensors(self) -> dict[str, Tensor]:
        return {"calls": torch.tensor([float(self.calls)])}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.calls = int(state["calls"])
        assert float(tensors["calls"]) == self.calls


@pytest.fixture(autouse=True)
def _seen() -> Iterator[None]:
    SEEN.clear()
    yield
    SEEN.clear()


def _engine(tmp_path: Path, name: str, stages: list[dict[str, Any]], resume: bool = False, **over: Any) -> Engine:
    tree = tiny_config(rounds=4, server_stages=stages, checkpoint={"every": 2}, **over)
    return Engine(parse_config(tree), tmp_path / name, tmp_path / name / "runs.db", resume=resume)


def test_each_point_runs_in_its_place_and_a_failed_round_keeps_the_model(tmp_path: Path) -> None:
    stages = [{"kind": "probe_stage", "at": at} for at in ("after_update", "before_rule", "after_release")]
    engine = _engine(tmp_path, "three", stages)
    engine.run()
    points = [point for point, r, _ in SEEN if r == 0]
    assert points == ["before_rule", "after_release", "after_update"]  # the round's order, not the list's
    before, _, after = (norm for _, r, norm in SEEN if r == 0)
    assert before != after  # after_update sees the new model
    failing = _engine(tmp_path, "failing", [{"kind": "probe_stage", "fail_rounds": [0, 1, 2, 3]}])
    start = failing.global_state.clone()
    failing.run()
    assert torch.equal(failing.global_state, start)  # every round failed: the model never moved


def test_the_plan_the_summary_and_the_run_store_list_the_stages(tmp_path: Path) -> None:
    stages = [{"kind": "probe_stage", "at": "before_rule"}, {"kind": "probe_stage", "at": "after_update"}]
    engine = _engine(tmp_path, "listed", stages, aggregator={"kind": "median"})
    engine.run()
    names = [(s.stage, s.kind) for s in round_plan(engine.cfg)]
    rule, first, second = (
        names.index(n)
        for n in (("aggregator", "median"), ("server_stage", "probe_stage"), ("server_stage", "probe_stage.2"))
    )
    assert first < rule < second  # before the rule; after the update, below the optimiser
    summary = json.loads((tmp_path / "listed" / "summary.json").read_text())
    assert [s["kind"] for s in summary["stages"] if s["stage"] == "server_stage"] == ["probe_stage", "probe_stage.2"]
    with RunStore.open_readonly(tmp_path / "listed" / "runs.db") as store:
        (run,) = store.list_runs()
        metrics = json.loads(store.rounds(run.run_id)[-1].metrics_json)
    assert metrics["probe_stage.calls"] == 4.0 and metrics["probe_stage.2.calls"] == 4.0


def test_a_stage_without_a_kind_or_a_factory_is_one_error() -> None:
    with pytest.raises(ConfigError, match=r"server_stages\[0\]: give factory"):
        parse_config(tiny_config(server_stages=[{"at": "before_rule"}]))
    with pytest.raises(ConfigError, match=r"server_stages\.at"):
        parse_config(tiny_config(server_stages=[{"kind": "probe_stage", "at": "somewhere"}]))


def test_the_example_guard_rejects_the_attacked_rounds_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/own_server_stage.yaml: a scaling attacker (30x) in the cohort makes the round's mean update
    several times the running mean, so once its warm-up of 2 accepted rounds is over the guard fails exactly
    the rounds with an attacker; the run cut after round 9 and resumed rejects the same rounds and ends with
    the same weights."""
    monkeypatch.chdir(ROOT)
    cfg = load_config("examples/own_server_stage.yaml", ["checkpoint.every=5", "progress=false"])
    assert [s.kind for s in cfg.server_stages] == ["norm_guard"]
    whole = Engine(cfg, tmp_path / "whole", tmp_path / "whole" / "runs.db")
    whole.run()
    with RunStore.open_readonly(tmp_path / "whole" / "runs.db") as store:
        (run,) = store.list_runs()
        rows = [json.loads(r.metrics_json) for r in store.rounds(run.run_id)]
    expected, accepted = [], 0
    for r, metrics in enumerate(rows):
        if metrics["malicious"] > 0 and accepted >= 2:
            expected.append(r)
        else:
            accepted += 1
    rejected = [r for r, metrics in enumerate(rows) if metrics["norm_guard.rejected"] == 1.0]
    assert len(rejected) >= 3 and rejected == expected
    guard = whole.server_stages.placed[0].stage
    assert guard.rejected == rejected  # type: ignore[attr-defined]
    cut = Engine(cfg, tmp_path / "cut", tmp_path / "cut" / "runs.db")
    cut.run(after_round=lambda row: row.round == 9)
    resumed = Engine(cfg, tmp_path / "cut", tmp_path / "cut" / "runs.db", resume=True)
    resumed.run()
    assert torch.equal(resumed.global_state, whole.global_state)
    assert resumed.server_stages.placed[0].stage.rejected == rejected  # type: ignore[attr-defined]


def test_the_example_stage_runs_from_python(tmp_path: Path) -> None:
    plain, guarded = (float(line.split("=")[1]) for line in run_example("own_server_stage.py", tmp_path))
    assert guarded > plain + 0.2, (plain, guarded)  # 0.77 against 0.36 on this machine


def test_the_registry_knows_the_probe() -> None:
    assert SERVER_STAGES.entry("probe_stage") is not None
