"""Tasks beyond classification: regression (MSE), next-token language modelling over whole sequences
(perplexity, padding ignored), a loss of your own from YAML; models whose output does not fit are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from fedsim import Simulation
from fedsim.cli import main
from fedsim.config import ConfigError, parse_config
from fedsim.data.base import ArrayDataset, ClientData
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from fedsim.tasks import Task
from tests.conftest import tiny_config

VOCAB, LENGTH = 12, 10


def linear_regression_data(clients: int = 8) -> ArrayDataset:
    """y = x . w + noise, each client a slice."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=6)
    x = rng.normal(size=(400, 6)).astype(np.float32)
    y = (x @ w + rng.normal(0, 0.05, 400)).astype(np.float32)
    parts = np.array_split(np.arange(320), clients)
    test = ClientData(torch.from_numpy(x[320:]), torch.from_numpy(y[320:]))
    return ArrayDataset(x[:320], y[:320], list(parts), test, num_classes=1)


def counting_sequences(clients: int = 6) -> ArrayDataset:
    """Token sequences that count up modulo VOCAB from a random start; targets are the inputs shifted by one,
    the last two positions of every other sequence padded with -100."""
    rng = np.random.default_rng(1)
    starts = rng.integers(0, VOCAB, 360)
    tokens = (starts[:, None] + np.arange(LENGTH + 1)) % VOCAB
    x, y = tokens[:, :-1].astype(np.float32), tokens[:, 1:].astype(np.int64)
    y[::2, -2:] = -100
    parts = np.array_split(np.arange(300), clients)
    test = ClientData(torch.from_numpy(x[300:]), torch.from_numpy(y[300:]))
    return ArrayDataset(x[:300], y[:300], list(parts), test, num_classes=VOCAB)


class TinyLM(nn.Module):
    """Embedding, a causal mixing of the previous token, a per-position head: (batch, length, vocab) logits."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, 16)
        self.head = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, vocab))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.embed(x.long()))


def tiny_lm(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return TinyLM(num_classes)


def regressor(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    return nn.Sequential(nn.Linear(input_shape[0], 16), nn.Tanh(), nn.Linear(16, num_classes))


def smooth_l1(beta: float = 1.0) -> Any:
    """A task factory named by import path in YAML: returns a plain loss function."""

    def huber(output: Tensor, target: Tensor) -> Tensor:
        return nn.functional.smooth_l1_loss(output.squeeze(-1), target, beta=beta)

    return huber


def _simulation(tmp: Path, data: ArrayDataset, model: Any, api_task: Any = None, **tree: Any) -> Simulation:
    tree = {"rounds": 8, **tree}
    cfg = tiny_config(
        data={"dataset": "digits", "clients": data.num_clients}, clients_per_round=data.num_clients, **tree
    )
    return Simulation(cfg, model=model, data=data, task=api_task, out=tmp / "out", db=tmp / "runs.db")


def _test_metric(db: Path, name: str) -> list[float]:
    with RunStore.open_readonly(db) as store:
        (run,) = store.list_runs()
        return [json.loads(r.metrics_json)[f"test_{name}"] for r in store.rounds(run.run_id)]


def test_regression_trains_on_mse(tmp_path: Path) -> None:
    sim = _simulation(
        tmp_path,
        linear_regression_data(),
        regressor,
        task={"kind": "regression"},
        algorithm={"kind": "fedavg", "lr": 0.05, "batch_size": 8},
    )
    summary = sim.run()
    mse = _test_metric(tmp_path / "runs.db", "mse")
    assert summary.task == "regression" and "accuracy" not in summary.final_metrics
    assert mse[-1] < 0.1 * mse[0], mse
    assert summary.final_metrics["mse"] == pytest.approx(summary.final_loss)
    with RunStore.open_readonly(tmp_path / "runs.db") as store:
        (run,) = store.list_runs()
        assert {r.test_accuracy for r in store.rounds(run.run_id)} == {None}  # a regression has no accuracy


@pytest.mark.parametrize("executor", ["sequential", "fused"])
def test_next_token_perplexity_over_padded_sequences_falls(tmp_path: Path, executor: str) -> None:
    sim = _simulation(
        tmp_path,
        counting_sequences(),
        tiny_lm,
        task={"kind": "language_model"},
        algorithm={"kind": "fedavg", "lr": 0.5, "batch_size": 10},
        executor={"kind": executor},
    )
    summary = sim.run()
    assert summary.executor == executor
    perplexity = _test_metric(tmp_path / "runs.db", "perplexity")
    assert perplexity[-1] < 1.2 < 2.0 < perplexity[0], perplexity  # the pattern is deterministic
    assert summary.final_metrics["accuracy"] > 0.9
    # units are real tokens: 60 test sequences x 10 positions, minus 2 padded in every other one
    assert sim.engine.last_eval is not None and sim.engine.last_eval.samples == 60 * LENGTH - 30 * 2


@pytest.mark.parametrize("task", ["regression", "language_model"])
def test_fused_and_sequential_agree(tmp_path: Path, task: str) -> None:
    """Both executors weight a batch's samples by the task's units: a sequence by its real tokens, so padding
    does not change what the fused executor trains (weighting sequences equally moved the model by ~1e-3)."""
    data, model, lr, batch = (
        (linear_regression_data(), regressor, 0.05, 8)
        if task == "regression"
        else (counting_sequences(), tiny_lm, 0.5, 10)
    )
    finals, rows = [], []
    for kind in ("sequential", "fused"):
        sim = _simulation(
            tmp_path / kind,
            data,
            model,
            task={"kind": task},
            algorithm={"kind": "fedavg", "lr": lr, "batch_size": batch},
            executor={"kind": kind},
            rounds=3,
        )
        sim.run()
        finals.append(sim.engine.global_state)
        with RunStore.open_readonly(tmp_path / kind / "runs.db") as store:
            (run,) = store.list_runs()
            rows.append([(r.round, r.clients, r.samples) for r in store.rounds(run.run_id)])
    assert rows[0] == rows[1]
    torch.testing.assert_close(finals[1], finals[0], rtol=0, atol=2e-5)


@pytest.mark.parametrize("kind", ["classification", "regression", "language_model", "language_model_1d"])
def test_a_tasks_batch_loss_is_its_per_sample_losses_weighted_by_units(kind: str) -> None:
    from fedsim.config.task import TaskConfig
    from fedsim.tasks import build_task

    g = torch.Generator().manual_seed(0)
    if kind == "classification":
        output, target = torch.randn(6, 4, generator=g), torch.tensor([0, 3, 1, 1, 2, 0])
    elif kind == "regression":
        output, target = torch.randn(6, 1, generator=g), torch.randn(6, generator=g)
    elif kind == "language_model":  # uneven padding: 5, 2, 0 and 4 real tokens
        output, target = torch.randn(4, 5, 7, generator=g), torch.randint(0, 7, (4, 5), generator=g)
        target[1, 2:], target[2, :], target[3, 4:] = -100, -100, -100
    else:  # one next token per sample, one of them padding
        output, target = torch.randn(5, 7, generator=g), torch.tensor([1, -100, 6, 0, 3])
    task = build_task(TaskConfig.model_validate({"kind": kind.removesuffix("_1d")}))
    per_sample, units = task.per_sample(output, target), task.units(target)
    direct = (per_sample * units).sum() / units.sum()  # the definition, written out
    torch.testing.assert_close(task.loss(output, target), direct, rtol=1e-6, atol=0)
    loss_sum, _, counted = task.sums(output, target).tolist()
    assert counted == units.sum().item() and loss_sum == pytest.approx(direct.item() * counted, rel=1e-6)
    if kind.startswith("language_model"):  # a token-weighted mean: exactly cross-entropy over the real tokens
        flat = nn.functional.cross_entropy(output.reshape(-1, 7), target.reshape(-1), ignore_index=-100)
        torch.testing.assert_close(task.loss(output, target), flat, rtol=1e-6, atol=0)
        assert units.tolist() == ([5.0, 2.0, 0.0, 4.0] if kind == "language_model" else [1.0, 0.0, 1.0, 1.0, 1.0])


def test_a_loss_of_your_own_by_import_path(tmp_path: Path) -> None:
    tree = tiny_config(
        data={"dataset": "digits", "clients": 8},
        task={"kind": "python", "factory": "tests.tasks.test_tasks:smooth_l1", "kwargs": {"beta": 0.5}},
        executor={"kind": "auto"},
        rounds=6,
    )
    data = linear_regression_data()
    engine = Engine(
        parse_config(tree), out_dir=tmp_path / "o", db_path=tmp_path / "r.db", dataset=data, model=regressor
    )
    summary = engine.run()
    assert summary.task == "huber" and summary.executor == "sequential"  # no per-sample loss: not fused
    losses = _test_metric(tmp_path / "r.db", "loss")
    assert losses[-1] < 0.2 * losses[0], losses


class Quantile(Task):
    """A task subclass with per-sample losses: fuses."""

    name = "quantile"

    def per_sample(self, output: Tensor, target: Tensor) -> Tensor:
        err = target - output.squeeze(-1)
        return torch.maximum(0.9 * err, -0.1 * err)


def test_a_task_subclass_fuses(tmp_path: Path) -> None:
    sim = _simulation(
        tmp_path, linear_regression_data(), regressor, api_task=Quantile(), executor={"kind": "auto"}, rounds=2
    )
    assert sim.run().executor == "fused"


@pytest.mark.parametrize(
    ("task", "message"),
    [
        (
            {"kind": "classification"},
            r"model: classification needs integer labels, the data's are floats \(task.kind regression\?\)",
        ),
        (
            {"kind": "language_model"},
            r"model: output \[2, 12\] does not fit next-token targets \[2, 10\] with a vocabulary of 12 "
            r"\(expected \[2, 10, 12\]\)",
        ),
    ],
)
def test_a_model_that_does_not_fit_the_task_is_refused(tmp_path: Path, task: dict[str, str], message: str) -> None:
    data = counting_sequences() if task["kind"] == "language_model" else linear_regression_data()
    with pytest.raises(ConfigError, match=message):
        _simulation(tmp_path, data, regressor, task=task)


def test_mismatches_are_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        ({"task": {"kind": "regression"}}, "model: regression needs float targets"),
        ({"task": {"kind": "python", "factory": "tests.tasks.nowhere:loss"}}, "task.factory: cannot import"),
        ({"task": {"kind": "python"}}, "task.factory goes with kind python"),
    ]
    for i, (extra, message) in enumerate(cases):
        path = tmp_path / f"run{i}.yaml"
        path.write_text(json.dumps(tiny_config(**extra)))
        with pytest.raises(SystemExit) as exited:
            main(["run", str(path), "--out", str(tmp_path / f"o{i}"), "--db", str(tmp_path / "r.db")])
        err = capsys.readouterr().err.strip()
        assert exited.value.code == 2 and err.startswith("fedsim: error: ") and "\n" not in err, err
        assert message in err, err


def regression_clients(clients: int, seed: int) -> ArrayDataset:
    """A dataset factory named by import path: ``tests.tasks.test_tasks:regression_clients``."""
    return linear_regression_data(clients)


def test_the_command_line_reports_the_tasks_headline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = tiny_config(
        data={"dataset": "python", "factory": "tests.tasks.test_tasks:regression_clients", "clients": 8},
        model={"kind": "python", "factory": "tests.tasks.test_tasks:regressor"},
        task={"kind": "regression"},
        rounds=2,
    )
    path = tmp_path / "run.yaml"
    path.write_text(json.dumps(tree))
    main(["run", str(path), "--out", str(tmp_path / "o"), "--db", str(tmp_path / "r.db")])
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert f"final_mse={summary['final_metrics']['mse']:.4f}" in out and "final_accuracy" not in out


def test_targets_a_task_cannot_take_are_named_by_value_and_sample() -> None:
    from fedsim.tasks import Classification, LanguageModel, Regression, TaskMismatch

    lm = LanguageModel(ignore_index=-100)
    lm.check_targets(torch.tensor([[1, 2, -100], [0, 9, -100]]), 10)  # padding is not a token
    with pytest.raises(TaskMismatch, match=r"^token id 10 of sample 1 is outside 0\.\.9 or ignore_index=-100 \("):
        lm.check_targets(torch.tensor([[1, 2, -100], [0, 10, -100]]), 10)
    with pytest.raises(TaskMismatch, match=r"^label 2 of sample 0 is outside 0\.\.1 \(num_classes=2\)$"):
        Classification().check_targets(torch.tensor([2, 0]), 2)
    Regression().check_targets(torch.tensor([-5.0, 1e9]), 1)  # a regression target has no range
