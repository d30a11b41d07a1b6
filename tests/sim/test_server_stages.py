"""Server stages of your own: run at their point, fail a round (the model stays), listed by the plan and
summary.json, kept by the checkpoint; examples/own_server_stage.py's per-client reputation from its own file."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
import torch
from pydantic import Field
from torch import Tensor

from fedsim.api.launch import execute, final_weights
from fedsim.config import (
    ConfigError,
    RowsStageConfig,
    ServerStageConfig,
    load_config,
    parse_config,
    register_server_stage,
)
from fedsim.config.server_stage import SERVER_STAGES
from fedsim.robust.gather import GatheredRows
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.plan import round_plan
from fedsim.sim.server_stages import ServerView, StageContext
from fedsim.sim.server_stages.contributions import Contributions
from tests.conftest import load_module, run_example, tiny_config

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


def _example() -> Any:
    """examples/own_server_stage.py as a module (its decorator registers the kind)."""
    return load_module("own_server_stage", ROOT / "examples" / "own_server_stage.py")


def _parts(cids: list[int], weights: list[float], tau: list[float]) -> Contributions:
    """Each client's part of FedNova's other sums, as the round keeps them for a stage that removes clients."""
    layout = {"tau": 1, "weight": 1, "clients": 1, "unclipped": 1}
    parts = Contributions(layout, cids, 2**20, Path("unused"), torch.device("cpu"))
    k = len(cids)
    column = {"tau": tau, "weight": weights, "clients": [1.0] * k, "unclipped": [0.0] * k}
    parts.keep_(cids, {name: torch.tensor(values)[:, None] for name, values in column.items()})
    return parts


def test_the_reputation_follows_its_formula_on_hand_worked_rows() -> None:
    """Three clients' updates (1, 0), (0.9, 0.1) and (-4, 0): the coordinate-wise median is (0.9, 0), the
    cosines 1, 0.9/sqrt(0.82) and -1; from a start of 0 with decay 0.5 the reputations are half of them, so
    the third (-0.5 < 0.1) is left out: its weighted update, its weight, its count and its part of FedNova's
    tau sum (weight 3 x tau 5) come off the sums."""
    example = _example()
    cfg = example.ReputationConfig(decay=0.5, threshold=0.1)
    stage = example.Reputation(cfg, StageContext(seed=0, population=5, n_params=2))
    rows = GatheredRows([1, 3, 4], 2, 2**20, Path("unused"), torch.device("cpu"))
    rows.put_([1, 3, 4], torch.tensor([[1.0, 0.0], [0.9, 0.1], [-4.0, 0.0]]), torch.tensor([2.0, 1.0, 3.0]))
    parts = _parts([1, 3, 4], weights=[2.0, 1.0, 3.0], tau=[2.0 * 4, 1.0 * 2, 3.0 * 5])
    delta = 2 * torch.tensor([1.0, 0.0]) + torch.tensor([0.9, 0.1]) + 3 * torch.tensor([-4.0, 0.0])
    sums = {"delta": delta.clone(), "weight": torch.tensor([6.0]), "clients": torch.tensor([3.0])}
    sums |= {"tau": torch.tensor([25.0]), "unclipped": torch.tensor([0.0])}
    stage.begin_round(0, [1, 3, 4])
    view = ServerView(0, sums, torch.zeros(2), 2, [], rows, parts)
    assert stage.apply_(view) is False
    expected = [0.0, 0.5, 0.0, 0.5 * 0.9 / math.sqrt(0.82), -0.5]
    assert stage.reputation.tolist() == pytest.approx(expected, rel=1e-6)  # float32 rows
    assert sums["delta"].tolist() == pytest.approx([2.9, 0.1], rel=1e-6)
    assert float(sums["weight"]) == 3.0 and float(sums["clients"]) == 2.0 and float(sums["tau"]) == 10.0
    assert stage.left_out == [[0, 4]] and stage.round_metrics()["left_out"] == 1.0
    assert rows.weights.tolist() == [2.0, 1.0, 0.0]  # a left-out client's coefficient in the sum is 0 now
    wary = example.Reputation(example.ReputationConfig(decay=0.9, start=-1.0), StageContext(0, 5, 2))
    alone = GatheredRows([4], 2, 2**20, Path("unused"), torch.device("cpu"))  # its own median: cosine 1
    alone.put_([4], torch.tensor([[-4.0, 0.0]]), torch.tensor([3.0]))
    sums = {"delta": torch.tensor([-12.0, 0.0]), "weight": torch.tensor([3.0]), "clients": torch.tensor([1.0])}
    sums |= {"tau": torch.tensor([15.0]), "unclipped": torch.tensor([0.0])}
    view = ServerView(0, sums, torch.zeros(2), 2, [], alone, _parts([4], weights=[3.0], tau=[15.0]))
    assert wary.apply_(view) is True  # nobody left: the round fails
    assert float(wary.reputation[4]) == pytest.approx(0.9 * -1.0 + 0.1 * 1.0)
    assert sums["delta"].tolist() == [0.0, 0.0] and float(sums["weight"]) == 0.0


def test_the_example_reputation_leaves_out_the_attackers_and_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/own_server_stage.yaml: sign-flipping attackers (20% of 40 clients, 4x) point away from the
    round's median, so their reputation falls below the threshold; nearly every update the stage leaves out is
    an attacker's (30 of 32 on this machine, of 35 attacker updates). The run cut after round 9 and resumed
    leaves out the same updates, with the same reputations, and ends with the same weights; the attack's count
    of malicious turns goes on across the cut."""
    monkeypatch.chdir(ROOT)
    cfg = load_config("examples/own_server_stage.yaml", ["checkpoint.every=5", "progress=false"])
    assert [s.kind for s in cfg.server_stages] == ["reputation"]
    whole = Engine(cfg, tmp_path / "whole", tmp_path / "whole" / "runs.db")
    whole.run()
    with RunStore.open_readonly(tmp_path / "whole" / "runs.db") as store:
        (run,) = store.list_runs()
        rows = [json.loads(r.metrics_json) for r in store.rounds(run.run_id)]
    stage = whole.server_stages.placed[0].stage
    assert whole.attack is not None
    malicious = set(whole.attack.malicious)
    left_out = [cid for _, cid in stage.left_out]  # type: ignore[attr-defined]
    attacked = sum(r["malicious"] for r in rows)
    assert sum(r["reputation.left_out"] for r in rows) == len(left_out)
    assert sum(c in malicious for c in left_out) >= 0.75 * attacked, (left_out, attacked)
    assert sum(c not in malicious for c in left_out) <= 0.1 * len(left_out)
    cut = Engine(cfg, tmp_path / "cut", tmp_path / "cut" / "runs.db")
    cut.run(after_round=lambda row: row.round == 9)
    resumed = Engine(cfg, tmp_path / "cut", tmp_path / "cut" / "runs.db", resume=True)
    resumed.run()
    assert torch.equal(resumed.global_state, whole.global_state)
    again = resumed.server_stages.placed[0].stage
    assert again.left_out == stage.left_out  # type: ignore[attr-defined]
    assert torch.equal(again.reputation, stage.reputation)  # type: ignore[attr-defined]
    summaries = [json.loads((tmp_path / run / "summary.json").read_text()) for run in ("whole", "cut")]
    assert [s["attack"]["malicious_turns"] for s in summaries] == [attacked, attacked]  # counted across the cut


@pytest.mark.slow
def test_the_gathered_rows_are_the_same_on_two_ranks(tmp_path: Path) -> None:
    """Each rank keeps the rows of the clients it trained; one all-reduce gives every rank all of them, so the
    stage leaves out the same updates in every round on 1 and on 2 ranks, and the weights agree."""
    stage = {"factory": f"{ROOT / 'examples' / 'own_server_stage.py'}:Reputation"}
    attack = {"kind": "sign_flip", "fraction": 0.25, "scale": 4.0}
    tree = tiny_config(rounds=5, clients_per_round=6, threads=1, devices=2, server_stages=[stage], attack=attack)
    tree["scheduler"] = {"kind": "even"}
    left_out = {}
    for ranks in (1, 2):
        execute(parse_config(tree), tmp_path / f"r{ranks}", tmp_path / f"r{ranks}.db", ranks=ranks)
        with RunStore.open_readonly(tmp_path / f"r{ranks}.db") as store:
            (run,) = store.list_runs()
            left_out[ranks] = [json.loads(r.metrics_json)["reputation.left_out"] for r in store.rounds(run.run_id)]
    assert left_out[1] == left_out[2] and sum(left_out[1]) > 0, left_out
    torch.testing.assert_close(final_weights(tmp_path / "r2"), final_weights(tmp_path / "r1"), rtol=0, atol=1e-5)


class ModelOnlyConfig(ProbeConfig):
    """The probe, declaring that it reads only the released sums and the model."""

    kind: Literal["model_only_probe"] = "model_only_probe"  # type: ignore[assignment]
    reads_records: ClassVar[bool] = False


class RowsProbeConfig(RowsStageConfig):
    """A probe that reads each client's update (and declares it reads no records)."""

    kind: Literal["rows_probe"] = "rows_probe"
    reads_records: ClassVar[bool] = False
    fail_rounds: list[int] = Field(default_factory=list)


register_server_stage(ModelOnlyConfig)(Probe)
register_server_stage(RowsProbeConfig)(Probe)


def test_a_stage_that_reads_rows_is_refused_beside_secagg_and_before_central_dp() -> None:
    _example()
    with pytest.raises(ConfigError, match="reputation reads each client's update, which secagg hides"):
        parse_config(
            tiny_config(
                server_stages=[{"kind": "reputation"}],
                secagg={"kind": "secagg_plus", "num_shares": 3, "reconstruction_threshold": 2},
            )
        )
    central = {"kind": "central", "clip": 1.0, "noise_multiplier": 1.0}
    with pytest.raises(ConfigError, match="probe_stage at before_rule would change the sum before DP's release"):
        parse_config(tiny_config(server_stages=[{"kind": "probe_stage", "at": "before_rule"}], privacy=central))
    with pytest.raises(ConfigError, match=r"probe_stage may read the clients' records .* declare reads_records"):
        parse_config(tiny_config(server_stages=[{"kind": "probe_stage", "at": "after_release"}], privacy=central))
    with pytest.raises(ConfigError, match="reputation at before_rule"):
        parse_config(tiny_config(server_stages=[{"kind": "reputation"}], privacy=central))
    with pytest.raises(ConfigError, match="rows_probe reads each client's un-noised update"):
        parse_config(tiny_config(server_stages=[{"kind": "rows_probe", "at": "after_release"}], privacy=central))
    local = central | {"kind": "local"}
    parse_config(tiny_config(server_stages=[{"kind": "rows_probe", "at": "after_release"}], privacy=local))
    parse_config(tiny_config(server_stages=[{"kind": "model_only_probe", "at": "after_release"}], privacy=central))
    fedbuff = {"kind": "fedbuff", "concurrency": 4}
    for elsewhere in ({"asynchronous": fedbuff, "clients_per_round": None, "clock": {"kind": "trace"}},):
        with pytest.raises(ConfigError, match="server_stages: not supported with asynchronous"):
            parse_config(tiny_config(server_stages=[{"kind": "probe_stage"}], **elsewhere))


@pytest.mark.slow
def test_the_example_stage_runs_from_python(tmp_path: Path) -> None:
    plain, guarded = (float(line.split("=")[1]) for line in run_example("own_server_stage.py", tmp_path))
    assert guarded > plain + 0.3, (plain, guarded)  # 0.80 against 0.10 on this machine


def test_the_registry_knows_the_probe() -> None:
    assert SERVER_STAGES.entry("probe_stage") is not None
