"""A server stage that takes clients out of a round (``view.leave_out_``) leaves the sums of a round those
clients never reported in, for every segment an algorithm sums: checked against that round itself, run with
the clients simply not in the cohort, for FedAvg, FedNova (whose ``tau`` sum the old weight-only removal left
in) and SCAFFOLD (whose server control variate it let the left-out clients move), on both executors; what
cannot be taken out exactly is refused in one line from the declarations."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
import torch
from pydantic import Field
from torch import Tensor

from fedsim.config import (
    ConfigError,
    RowsStageConfig,
    SelectionConfig,
    ServerStageConfig,
    parse_config,
    register_selector,
    register_server_stage,
)
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.selection import SelectionContext
from fedsim.sim.server_stages import ServerView, StageContext, Stateless
from tests.conftest import tiny_config

COHORT = [0, 1, 2, 3, 4, 5, 6, 7]
OUT = [2, 5]


class FixedCohortConfig(SelectionConfig):
    kind: Literal["test_fixed_cohort"] = "test_fixed_cohort"
    reads_clients: ClassVar[bool] = False
    clients: list[int] = Field(default_factory=list)


@register_selector(FixedCohortConfig)
class FixedCohort:
    """The same cohort every round: the round with and without the left-out clients differ in them alone."""

    def __init__(self, cfg: FixedCohortConfig, context: SelectionContext) -> None:
        self.cfg = cfg

    def select(self, r: int) -> list[int]:
        return sorted(self.cfg.clients)

    def observe(self, r: int, records: Sequence[ClientRecord]) -> None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def tensors(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        return None


class LeaveOutConfig(RowsStageConfig):
    kind: Literal["test_leave_out"] = "test_leave_out"
    at: Literal["before_rule"] = "before_rule"
    reads_records: ClassVar[bool] = False
    removes_clients: ClassVar[bool] = True
    clients: list[int] = Field(default_factory=list)
    weight_only: bool = False  # the old example's removal: the weighted update, the weight and the count


@register_server_stage(LeaveOutConfig)
class LeaveOut(Stateless):
    def __init__(self, cfg: LeaveOutConfig, context: StageContext) -> None:
        self.cfg = cfg

    def apply_(self, view: ServerView) -> bool:
        rows = view.rows
        assert rows is not None
        if not self.cfg.weight_only:
            view.leave_out_(self.cfg.clients)
            return False
        for cid in self.cfg.clients:  # what examples/own_server_stage.py did before view.leave_out_
            i = rows.place[cid]
            view.sums["delta"].sub_(rows.rows[i] * rows.weights[i])
            view.sums["weight"].sub_(rows.weights[i])
            view.sums["clients"].sub_(1.0)
        return False


def _round(tmp_path: Path, name: str, algorithm: str, executor: str, cohort: list[int], **stage: Any) -> Engine:
    """One round of ``algorithm`` on ``cohort``; with ``stage``, the leave-out stage's settings."""
    tree = tiny_config(rounds=1, clients_per_round=len(cohort), eval_every=100, algorithm__kind=algorithm)
    tree["algorithm"]["local_epochs"] = 2  # clients of different sizes take different numbers of steps (tau)
    tree["selection"] = {"kind": "test_fixed_cohort", "clients": cohort}
    tree["executor"] = {"kind": "fused", "clients": 4} if executor == "fused" else {"kind": executor}
    if stage:
        tree["server_stages"] = [{"kind": "test_leave_out", **stage}]
    engine = Engine(parse_config(tree), out_dir=tmp_path / name, db_path=tmp_path / name / "runs.db")
    engine.run()
    return engine


def _control(engine: Engine) -> Tensor | None:
    c = getattr(engine.algorithm, "c", None)
    return None if c is None else c.clone()


@pytest.mark.parametrize("executor", ["sequential", "fused"])
@pytest.mark.parametrize("algorithm", ["fedavg", "fednova", "scaffold"])
def test_leaving_clients_out_is_the_round_they_were_not_in(tmp_path: Path, algorithm: str, executor: str) -> None:
    """The reference is fedsim's own round without clients 2 and 5 in the cohort (same seed, same model, the
    other clients' training keyed by (seed, round, client) so it is the same): the new global model and
    SCAFFOLD's server control variate agree to float32 tolerance, not bit for bit, because the full sum was
    added in another order and two clients' parts were then subtracted (measured: at most 3.0e-8 apart on the
    model, 5.6e-9 on c). The old weight-only removal is checked to differ where it left a sum behind, so the
    comparison can see what it checks: measured, FedNova's step 73% off the reference round's (it took off
    weight / tau as the weight and kept tau), SCAFFOLD's c 38% off (the left-out clients' control deltas)."""
    kept = [c for c in COHORT if c not in OUT]
    left = _round(tmp_path, "left", algorithm, executor, COHORT, clients=OUT)
    never = _round(tmp_path, "never", algorithm, executor, kept)
    start = _round(tmp_path, "start", algorithm, executor, COHORT, clients=COHORT[:0])
    moved = never.global_state - start.global_state  # what the reference round moved the model by, for scale
    assert float(moved.norm()) > 0
    torch.testing.assert_close(left.global_state, never.global_state, rtol=1e-5, atol=1e-6)
    c_left, c_never = _control(left), _control(never)
    if algorithm == "scaffold":
        assert c_left is not None and c_never is not None and float(c_never.norm()) > 0
        torch.testing.assert_close(c_left, c_never, rtol=1e-5, atol=1e-7)
    old = _round(tmp_path, "old", algorithm, executor, COHORT, clients=OUT, weight_only=True)
    if algorithm == "fednova":  # its tau sum kept the left-out clients' steps: the step length is off
        off = float((old.global_state - never.global_state).norm() / (never.global_state - start.global_state).norm())
        assert off > 0.02
    if algorithm == "scaffold":  # the left-out clients' control-variate deltas stayed in the server's c
        c_old = _control(old)
        assert c_old is not None and c_never is not None
        assert float((c_old - c_never).norm()) > 0.05 * float(c_never.norm())


def _refusal(**overrides: Any) -> str:
    tree = tiny_config(**overrides)
    with pytest.raises(ConfigError) as caught:
        parse_config(tree)
    return str(caught.value)


class RecordsOnlyConfig(ServerStageConfig):
    kind: Literal["test_records_only_remover"] = "test_records_only_remover"
    at: Literal["before_rule"] = "before_rule"
    removes_clients: ClassVar[bool] = True


register_server_stage(RecordsOnlyConfig)(LeaveOut)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"aggregator": {"kind": "median"}},
            "server_stages: test_leave_out removes clients from the round's sums, but aggregator.kind=median combines"
            " the rows it gathered itself, which would still hold them",
        ),
        (
            {"algorithm": {"kind": "fedlgd", "lr": 0.1}},
            "server_stages: algorithm.kind=fedlgd adopts its elected leaders' models",  # as any stage reading rows
        ),
    ],
    ids=["gathering_rule", "elected_model"],
)
def test_what_cannot_be_taken_out_exactly_is_refused_in_one_line(overrides: dict[str, Any], message: str) -> None:
    stage = {"server_stages": [{"kind": "test_leave_out", "clients": OUT}]}
    got = _refusal(**stage, **overrides)
    assert message in got and "\n" not in got.strip()


def test_a_stage_that_removes_clients_without_rows_is_refused_in_one_line() -> None:
    got = _refusal(server_stages=[{"kind": "test_records_only_remover"}])
    assert (
        "test_records_only_remover removes clients from the round's sums, which takes each client's update row" in got
    )


class LateLeaveOutConfig(LeaveOutConfig):
    kind: Literal["test_late_leave_out"] = "test_late_leave_out"  # type: ignore[assignment]
    at: Literal["after_release"] = "after_release"  # type: ignore[assignment]


register_server_stage(LateLeaveOutConfig)(LeaveOut)


def test_a_stage_that_removes_clients_after_the_release_is_refused_in_one_line() -> None:
    """After the release an adaptive clip and centered clipping have already read the sums with the clients in."""
    got = _refusal(server_stages=[{"kind": "test_late_leave_out"}])
    assert "test_late_leave_out removes clients from the round's sums: it runs at before_rule" in got


@pytest.mark.slow
def test_the_reputation_example_leaves_the_same_clients_out_on_one_and_two_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clients' parts are all-reduced with their rows: FedNova under sign-flipping attackers ends the same
    whichever rank trained whom."""
    from tests.conftest import on_one_and_two_ranks

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    tree = tiny_config(rounds=3, clients_per_round=8, data__clients=16, algorithm__kind="fednova")
    tree["attack"] = {"kind": "sign_flip", "fraction": 0.25, "scale": 4.0}
    tree["server_stages"] = [{"factory": "examples/own_server_stage.py:Reputation"}]
    one, two = on_one_and_two_ranks(tree, tmp_path)
    torch.testing.assert_close(two, one, rtol=0, atol=2e-5)
