"""The fused executor trains the sequential executor's clients, batches and rows, to float32 re-association."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.algorithms.base import RoundContext
from fedsim.api.launch import execute, final_weights
from fedsim.config import ConfigError, parse_config
from fedsim.runstore import RunStore
from fedsim.sim.executors.batch_plan import BatchPlan
from fedsim.sim.executors.fused import FusedExecutor
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config, with_server

FUSED = ["fedavg", "fedprox", "fednova", "scaffold"]  # every group-form one
SERVER = ["fedavg+fedadam", "scaffold+adam", "fedavg+fedavgm"]  # server optimisers: the same step on every rank
# The K clients' gradients come from batched kernels and their sum from one matmul: float32 re-association
# only. Measured over 6 rounds: at most 1e-7 for the MLP below, 4e-7 for the GroupNorm CNN with FedAvg,
# FedProx and FedNova. A max-pool over ReLU outputs is not smooth: a difference of one ulp can flip which of
# two tied zeros it routes the gradient to, and SCAFFOLD on the CNN then drifts apart from round 4 (5e-3; at
# lr 0.1 FedAvg does too), as two sequential runs on different BLAS builds would. So the four algorithms are
# compared on an MLP, and the CNN (grouped convolutions, GroupNorm) with FedAvg.
ATOL = 2e-5
MLP = {"kind": "mlp", "hidden": [32]}


def _tree(name: str, kind: str, **overrides: Any) -> dict[str, Any]:
    tree: dict[str, Any] = {
        "rounds": 4,
        "clients_per_round": 7,  # two groups of 3 and one of 1: uneven groups
        "threads": 1,
        "algorithm": {"lr": 0.05, "batch_size": 8, "local_epochs": 2, "client_optimizer": {"weight_decay": 0.001}},
        "model": {"kind": "cnn", "channels": [4, 8], "groups": 2},
        "executor": {"kind": kind, "clients": 3},
    }
    server = with_server(name)
    tree["algorithm"]["kind"] = server.pop("algorithm__kind")
    return tiny_config(**{**tree, **server, **overrides})


def _run(tmp_path: Path, name: str, kind: str, **overrides: Any) -> Engine:
    out = tmp_path / f"{name}-{kind}"
    engine = Engine(parse_config(_tree(name, kind, **overrides)), out_dir=out, db_path=out / "runs.db")
    engine.run()
    return engine


def _rows(engine: Engine) -> tuple[list[Any], list[Any], list[float | None]]:
    with RunStore.open_readonly(engine.out_dir / "runs.db") as store:
        (run,) = store.list_runs()
        rounds = store.rounds(run.run_id)
        clients = store.client_runs(run.run_id)
    exact = [(r.round, r.samples, r.clients, r.bytes_up, r.bytes_down, r.test_accuracy) for r in rounds]
    turns = sorted((c.round, c.client, c.device, c.samples) for c in clients)
    losses = [c.loss for c in sorted(clients, key=lambda c: (c.round, c.client))]
    return exact, turns, losses


@pytest.mark.parametrize(("name", "model"), [(n, MLP) for n in FUSED] + [("fedavg", None)])
def test_fused_gives_the_sequential_weights_cohorts_and_rows(name: str, model: Any, tmp_path: Path) -> None:
    over = {"model": model} if model else {}
    sequential, fused = _run(tmp_path, name, "sequential", **over), _run(tmp_path, name, "fused", **over)
    assert isinstance(fused.executor, FusedExecutor)
    torch.testing.assert_close(fused.global_state, sequential.global_state, rtol=0, atol=ATOL)
    seq_exact, seq_turns, seq_losses = _rows(sequential)
    fused_exact, fused_turns, fused_losses = _rows(fused)
    assert fused_turns == seq_turns  # same cohorts, devices and samples seen, client by client
    assert fused_exact == seq_exact  # same bytes, sample counts and test accuracy, round by round
    assert fused_losses == pytest.approx(seq_losses, abs=1e-5)
    summary = json.loads((fused.out_dir / "summary.json").read_text())
    assert summary["executor"] == "fused" and summary["accelerator"] == "cpu"


@pytest.mark.parametrize("clients", [7, 4])
def test_the_step_fused_into_the_backward_leaves_the_global_model_alone(clients: int, tmp_path: Path) -> None:
    """Plain SGD without weight decay takes the step inside the backward (fedsim.sim.executors.fused_sgd); a
    last group of one client (7 = 3 + 3 + 1, 4 = 3 + 1) once trained in the global model's own memory."""
    weights = {}
    for kind in ("sequential", "fused"):
        tree = _tree("fedavg", kind, model=MLP, clients_per_round=clients, rounds=2)
        tree["algorithm"]["client_optimizer"] = {"weight_decay": 0.0}
        engine = Engine(parse_config(tree), out_dir=tmp_path / kind, db_path=tmp_path / f"{kind}.db")
        assert kind == "sequential" or engine.executor.sgd_layers is not None  # type: ignore[attr-defined]
        engine.run()
        weights[kind] = engine.global_state
    torch.testing.assert_close(weights["fused"], weights["sequential"], rtol=0, atol=ATOL)


@pytest.mark.slow
@pytest.mark.parametrize("name", FUSED + SERVER)
def test_fused_on_two_ranks_gives_the_sequential_weights(name: str, tmp_path: Path) -> None:
    outs = {}
    for kind in ("sequential", "fused"):
        tree = _tree(name, kind, devices=2, scheduler={"kind": "even"}, model=MLP)
        outs[kind] = tmp_path / kind
        execute(parse_config(tree), outs[kind], tmp_path / f"{kind}.db", ranks=2 if kind == "fused" else 1)
    torch.testing.assert_close(final_weights(outs["fused"]), final_weights(outs["sequential"]), rtol=0, atol=ATOL)


def test_each_client_sees_the_batches_it_sees_when_trained_alone(tmp_path: Path) -> None:
    """The fused plan draws every client's batches from the client's own generator, as local SGD does."""
    engine = Engine(parse_config(_tree("fedavg", "sequential")), out_dir=tmp_path, db_path=tmp_path / "r.db")
    seen: list[torch.Tensor] = []
    handle = engine.executor.replica.module.register_forward_pre_hook(lambda _m, args: seen.append(args[0].clone()))
    cohort = [(3, 0), (5, 0), (8, 0)]
    engine.executor.begin_round()
    engine.executor.train(RoundContext(2, engine.global_state, engine.opt), cohort)
    handle.remove()
    opt = engine.algorithm.cfg  # type: ignore[attr-defined]
    data = [engine.dataset.client(cid) for cid, _ in cohort]
    from fedsim.sim.rounds.cohort import client_generator

    plan = BatchPlan([d.n_samples for d in data], [client_generator(0, 2, cid) for cid, _ in cohort], opt)
    pool = torch.cat([*(d.x for d in data), torch.zeros_like(data[0].x[:1])])
    expected = [
        pool[plan.index[step, k][plan.mask[step, k].bool()]]
        for k in range(len(cohort))
        for step in range(plan.steps[k])
    ]
    assert len(seen) == len(expected) == sum(plan.steps)
    for got, want in zip(seen, expected, strict=True):
        assert torch.equal(got, want)
    engine.close()


@pytest.mark.parametrize("name", ["fedavg", "scaffold"])
def test_the_top_k_compressor_fuses_with_the_sequential_bytes_and_weights(name: str, tmp_path: Path) -> None:
    """Update transforms run on each client's own row in both executors (the compressor with its error-feedback
    residual in the client's state), before the rows are summed."""
    topk = {"kind": "none", "knob": {"name": "topk", "ladder": [0.1]}}
    sequential = _run(tmp_path, name, "sequential", model=MLP, control=topk)
    fused = _run(tmp_path, name, "fused", model=MLP, control=topk)
    assert fused.executor_kind == "fused"
    torch.testing.assert_close(fused.global_state, sequential.global_state, rtol=0, atol=ATOL)
    assert _rows(fused)[0] == _rows(sequential)[0]  # bytes_up counts k entries per client, round by round
    for cid in range(10):
        seq, fus = sequential.store.get(cid), fused.store.get(cid)
        assert (seq is None) == (fus is None)
        if seq is not None and fus is not None:
            torch.testing.assert_close(fus["uplink.residual"], seq["uplink.residual"], rtol=0, atol=ATOL)


@pytest.mark.slow
def test_what_cannot_fuse_says_why_and_auto_falls_back(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"executor\.kind=fused: algorithm 'ditto' writes its own client_update"):
        _run(tmp_path, "ditto", "fused")
    with pytest.raises(ConfigError, match=r"executor\.kind=fused: the model has \d+ float buffer values \(BatchNorm"):
        _run(tmp_path, "fedavg", "fused", model={"kind": "cnn", "channels": [4, 8], "norm": "batch"})
    assert _run(tmp_path, "ditto", "auto").executor_kind == "sequential"
    assert _run(tmp_path, "fedavg", "auto").executor_kind == "fused"


@pytest.mark.parametrize("samples", [16, 12])
def test_consecutive_clients_train_on_a_view_of_their_data_and_match_the_sequential_executor(
    samples: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Equal clients, all in every round, batches that divide their data: each group's samples are one view of
    the dataset's array (no copy); with short batches (12 = 8 + 4) the padded copy is used. Either way the
    models are the sequential executor's."""
    views: list[bool] = []
    group_data = FusedExecutor._group_data

    def spy(self: FusedExecutor, data: list[Any], padded: bool) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = group_data(self, data, padded)
        views.append(x.data_ptr() == data[0].x.data_ptr())
        return x, y

    monkeypatch.setattr(FusedExecutor, "_group_data", spy)
    weights = {}
    for kind in ("sequential", "fused"):
        tree = _tree("fedavg", kind, model=MLP, clients_per_round=6, rounds=2)
        tree["data"] = {"dataset": "random", "clients": 6, "samples_per_client": samples, "features": 10}
        tree["algorithm"]["client_optimizer"] = {"weight_decay": 0.0}
        engine = Engine(parse_config(tree), out_dir=tmp_path / kind, db_path=tmp_path / f"{kind}.db")
        engine.run()
        weights[kind] = engine.global_state
    torch.testing.assert_close(weights["fused"], weights["sequential"], rtol=0, atol=ATOL)
    assert len(views) == 4  # two groups of three, two rounds
    assert all(views) if samples == 16 else not any(views)


class _Shifted(torch.nn.Module):
    """An MLP over digits with a constant float buffer added to its input (as a transformer's position table),
    and optional dropout."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.offset: torch.Tensor
        self.register_buffer("offset", torch.linspace(-1.0, 1.0, 64, device="cpu"))
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Dropout(dropout), torch.nn.Linear(32, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x.flatten(1) + self.offset)  # digits come as (1, 8, 8) images
        return out


def _own_model_run(tmp_path: Path, kind: str, dropout: float, seed: int = 0) -> Engine:
    out = tmp_path / f"own-{kind}-{dropout}-{seed}"
    cfg = parse_config({**_tree("fedavg", kind, model=MLP), "seed": seed})
    engine = Engine(cfg, out_dir=out, db_path=out / "runs.db", model=_Shifted(dropout))
    engine.run()
    return engine


def test_a_constant_float_buffer_is_shared_by_the_group_and_left_as_it_was(tmp_path: Path) -> None:
    """Float buffers that training does not write fuse: the models are the sequential executor's, and the
    buffer's slot of the global state still holds the table."""
    sequential = _own_model_run(tmp_path, "sequential", dropout=0.0)
    fused = _own_model_run(tmp_path, "fused", dropout=0.0)
    assert fused.executor_kind == "fused"
    torch.testing.assert_close(fused.global_state, sequential.global_state, rtol=0, atol=ATOL)
    table = fused.global_state[-64:]
    torch.testing.assert_close(table, torch.linspace(-1.0, 1.0, 64), rtol=0, atol=0)


def test_dropout_fuses_with_each_client_its_own_masks_and_a_run_repeats(tmp_path: Path) -> None:
    """Dropout under the fused executor: the same seed gives the same weights to the bit, another seed other
    weights; each client draws its own masks, so the group's clients do not move alike."""
    first = _own_model_run(tmp_path / "a", "fused", dropout=0.5)
    again = _own_model_run(tmp_path / "b", "fused", dropout=0.5)
    other = _own_model_run(tmp_path / "c", "fused", dropout=0.5, seed=1)
    no_dropout = _own_model_run(tmp_path / "d", "fused", dropout=0.0)
    assert torch.equal(first.global_state, again.global_state)
    assert not torch.allclose(first.global_state, other.global_state, atol=1e-3)
    assert not torch.allclose(first.global_state, no_dropout.global_state, atol=1e-3)
