"""Server optimisers: each step against torch.optim's own, or against the paper's formula written out here."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fedsim.algorithms.base import MeanUpdate
from fedsim.algorithms.server import ServerOptimizerContext, ServerStep
from fedsim.config import SERVER_OPTIMIZERS, ConfigError, SpellingNote, load_config, parse_config
from fedsim.sim.rounds.engine import Engine
from tests.conftest import RunFactory, run_example, tiny_config

ROOT = Path(__file__).resolve().parents[2]

SIZES = (6, 4, 5)  # three parameter tensors
N_PARAMS = sum(SIZES)


def _step(settings: dict[str, object], sizes: tuple[int, ...] = SIZES) -> ServerStep:
    return ServerStep(SERVER_OPTIMIZERS.parse(settings), ServerOptimizerContext(sizes))


def _updates(rounds: int = 5, numel: int = N_PARAMS) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return [torch.randn(numel, generator=g) * 0.3 for _ in range(rounds)]


def _start(numel: int = N_PARAMS) -> torch.Tensor:
    return torch.randn(numel, generator=torch.Generator().manual_seed(3))


def _against_torch(settings: dict[str, object], make: Callable[[list[torch.Tensor]], torch.optim.Optimizer]) -> None:
    """Five server steps on the same mean updates: ours on the flat state, torch.optim's on one parameter
    whose gradient is the negative update (Reddi et al.'s pseudo-gradient)."""
    step, x = _step(settings), _start()
    param = torch.nn.Parameter(x.clone())
    reference = make([param])
    for delta in _updates():
        step.apply_(x, MeanUpdate(delta * 4.0, 4.0), N_PARAMS)
        param.grad = -delta
        reference.step()
        torch.testing.assert_close(x, param.detach(), rtol=1e-6, atol=1e-7)
    assert not torch.equal(x, _start())


def test_sgd_with_momentum_is_torch_sgd() -> None:
    _against_torch({"kind": "sgd", "lr": 0.7, "momentum": 0.9}, lambda p: torch.optim.SGD(p, lr=0.7, momentum=0.9))


def test_sgd_with_nesterov_is_torch_sgd() -> None:
    settings = {"kind": "sgd", "lr": 0.5, "momentum": 0.8, "nesterov": True}
    _against_torch(settings, lambda p: torch.optim.SGD(p, lr=0.5, momentum=0.8, nesterov=True))


def test_adam_is_torch_adam() -> None:
    settings = {"kind": "adam", "lr": 0.03, "beta1": 0.8, "beta2": 0.95, "eps": 1e-6}
    _against_torch(settings, lambda p: torch.optim.Adam(p, lr=0.03, betas=(0.8, 0.95), eps=1e-6))


def test_adagrad_is_torch_adagrad() -> None:
    settings = {"kind": "adagrad", "lr": 0.1, "eps": 1e-8, "initial_accumulator_value": 0.2}
    _against_torch(settings, lambda p: torch.optim.Adagrad(p, lr=0.1, eps=1e-8, initial_accumulator_value=0.2))


def test_plain_sgd_adds_lr_times_the_mean_to_the_whole_state() -> None:
    step, x = _step({"kind": "sgd", "lr": 3.0}), torch.zeros(3)
    step.apply_(x, MeanUpdate(torch.tensor([2.0, 2.0, 1.0]), 2.0), n_params=2)  # the last entry is a buffer
    assert x.tolist() == [3.0, 3.0, 1.5]
    assert step.optimizer is None and step.state_dict().keys() == {"steps"}


def test_a_stateful_optimiser_gives_buffers_the_mean_as_it_is() -> None:
    step, x = _step({"kind": "sgd", "lr": 3.0, "momentum": 0.5}, sizes=(2,)), torch.zeros(3)
    step.apply_(x, MeanUpdate(torch.tensor([2.0, 2.0, 1.0]), 2.0), n_params=2)
    assert x.tolist() == [3.0, 3.0, 0.5]


def test_fedavgm_momentum_by_hand() -> None:
    step, x = _step({"kind": "sgd", "lr": 1.0, "momentum": 0.5}, sizes=(1,)), torch.zeros(1)
    for _ in range(2):
        step.apply_(x, MeanUpdate(torch.tensor([2.0]), 2.0), n_params=1)
    assert x.item() == pytest.approx(1.0 + 1.5)  # m = 1, then 0.5 * 1 + 1


def test_fedadam_step_by_hand() -> None:
    step, x = _step({"kind": "fedadam", "lr": 0.1, "beta1": 0.9, "beta2": 0.99, "tau": 0.01}, (2,)), torch.zeros(2)
    step.apply_(x, MeanUpdate(torch.tensor([2.0, -4.0]), 2.0), n_params=2)
    m = torch.tensor([0.1, -0.2])
    v = 0.99 * 1e-4 + 0.01 * torch.tensor([1.0, 4.0])  # v starts at tau^2, no bias correction
    torch.testing.assert_close(x, 0.1 * m / (v.sqrt() + 0.01))
    restored = _step({"kind": "fedadam"}, (2,))
    restored.load_state_dict(step.state_dict())
    assert restored.steps == 1 and torch.equal(restored.state_dict()["v"], v)


def test_fedyogi_second_moment_by_hand() -> None:
    step, x = _step({"kind": "fedyogi", "lr": 1.0, "beta1": 0.0, "beta2": 0.9, "tau": 0.5}, (1,)), torch.zeros(1)
    step.apply_(x, MeanUpdate(torch.tensor([4.0]), 2.0), n_params=1)
    v = 0.25 - 0.1 * 4.0 * -1.0  # v0 = tau^2 = 0.25 < D^2 = 4: v grows additively
    torch.testing.assert_close(x, torch.tensor([2.0 / (v**0.5 + 0.5)]))


def test_fedadagrad_accumulates_by_hand() -> None:
    step, x = _step({"kind": "fedadagrad", "lr": 0.5, "beta1": 0.0, "tau": 0.1}, (1,)), torch.zeros(1)
    step.apply_(x, MeanUpdate(torch.tensor([3.0]), 1.0), n_params=1)
    step.apply_(x, MeanUpdate(torch.tensor([-1.0]), 1.0), n_params=1)
    first = 0.5 * 3.0 / (math.sqrt(0.01 + 9.0) + 0.1)
    second = 0.5 * -1.0 / (math.sqrt(0.01 + 9.0 + 1.0) + 0.1)
    assert x.item() == pytest.approx(first + second, rel=1e-6)


def _lamb_reference(x: list[list[float]], deltas: list[list[list[float]]], lr: float, wd: float) -> list[float]:
    """You et al.'s Algorithm 2 in plain floats, tensor by tensor (b1 0.9, b2 0.999, eps 1e-6)."""
    b1, b2, eps = 0.9, 0.999, 1e-6
    m = [[0.0] * len(t) for t in x]
    v = [[0.0] * len(t) for t in x]
    for t, delta in enumerate(deltas, 1):
        for layer, (w, d) in enumerate(zip(x, delta, strict=True)):
            g = [-di for di in d]
            m[layer] = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m[layer], g, strict=True)]
            v[layer] = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v[layer], g, strict=True)]
            r = [
                (mi / (1 - b1**t)) / (math.sqrt(vi / (1 - b2**t)) + eps)
                for mi, vi in zip(m[layer], v[layer], strict=True)
            ]
            u = [ri + wd * wi for ri, wi in zip(r, w, strict=True)]
            w_norm, u_norm = math.sqrt(sum(wi * wi for wi in w)), math.sqrt(sum(ui * ui for ui in u))
            ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
            x[layer] = [wi - lr * ratio * ui for wi, ui in zip(w, u, strict=True)]
    return [wi for layer in x for wi in layer]


def test_lamb_scales_each_tensor_by_its_trust_ratio() -> None:
    sizes = (3, 2)
    step, x = _step({"kind": "lamb", "lr": 0.1, "weight_decay": 0.01}, sizes), torch.tensor([1.0, -2.0, 0.5, 3.0, 0.0])
    deltas = [[[0.2, 0.1, -0.3], [0.05, 0.4]], [[-0.1, 0.3, 0.2], [0.1, -0.2]], [[0.0, 0.1, 0.1], [0.3, 0.3]]]
    expected = _lamb_reference([[1.0, -2.0, 0.5], [3.0, 0.0]], deltas, lr=0.1, wd=0.01)
    for delta in deltas:
        step.apply_(x, MeanUpdate(torch.tensor([d for layer in delta for d in layer]), 1.0), n_params=5)
    torch.testing.assert_close(x, torch.tensor(expected), rtol=1e-5, atol=1e-6)


def test_the_schedule_scales_each_server_step() -> None:
    step, x = _step({"kind": "sgd", "lr": 2.0, "schedule": {"kind": "exponential", "gamma": 0.5}}, (1,)), torch.zeros(1)
    for _ in range(3):
        step.apply_(x, MeanUpdate(torch.ones(1), 1.0), n_params=1)
    assert x.item() == pytest.approx(2.0 + 1.0 + 0.5)


@pytest.mark.parametrize(
    ("old", "kind", "moved"),
    [
        ({"name": "fedadam", "server_lr": 0.05, "tau": 0.01}, "fedadam", {"lr": 0.05, "tau": 0.01}),
        ({"name": "fedyogi", "beta2": 0.9}, "fedyogi", {"beta2": 0.9}),
        ({"name": "fedavgm", "server_lr": 0.7}, "sgd", {"lr": 0.7, "momentum": 0.9}),
        ({"name": "scaffold", "server_lr": 0.5}, "sgd", {"lr": 0.5}),
    ],
)
def test_old_spellings_load_with_a_note(old: dict[str, object], kind: str, moved: dict[str, float]) -> None:
    overrides = [f"algorithm.{k}={v}" for k, v in old.items()]
    with pytest.warns(SpellingNote) as notes:  # algorithm.name's note, then the server step's
        cfg = load_config("examples/quickstart.yaml", overrides)
    assert any(f"server_optimizer.kind={kind}" in str(note.message) for note in notes)
    assert cfg.algorithm.kind == ("fedavg" if old["name"] != "scaffold" else "scaffold")
    assert cfg.server_optimizer.kind == kind
    assert {k: getattr(cfg.server_optimizer, k) for k in moved} == moved


def test_an_old_server_lr_beside_a_server_optimizer_is_one_error() -> None:
    with pytest.raises(ConfigError, match="give server_optimizer alone"), warnings.catch_warnings():
        load_config("examples/quickstart.yaml", ["algorithm.server_lr=0.5", "server_optimizer.kind=adam"])


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["algorithm.kind=fedlgd"], "adopts its elected leaders"),
        (["asynchronous.kind=fedasync", "clients_per_round=null", "clock.kind=trace"], "mixes each local model"),
    ],
)
def test_runs_without_a_server_step_refuse_an_optimiser(overrides: list[str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_config("examples/quickstart.yaml", [*overrides, "server_optimizer.kind=adam"])


@pytest.mark.parametrize("name", ["scaffold", "fedprox", "fednova", "ditto"])
def test_every_algorithm_takes_a_server_optimiser(run_engine: RunFactory, name: str) -> None:
    plain = run_engine(tiny_config(rounds=2, algorithm__kind=name))
    adam = run_engine(tiny_config(rounds=2, algorithm__kind=name, server_optimizer__kind="adam"))
    moments = adam.server_step.state_dict()
    assert int(moments["steps"]) == 2 and int(moments["t"]) == 2 and float(moments["v"].abs().sum()) > 0
    assert not torch.equal(plain.global_state, adam.global_state)


@pytest.mark.parametrize("server", [{"kind": "adam", "lr": 0.01}, {"kind": "fedyogi"}, {"kind": "lamb", "lr": 0.05}])
def test_a_resumed_run_steps_as_the_uninterrupted_one(tmp_path: Path, server: dict[str, object]) -> None:
    cfg = parse_config(
        tiny_config(rounds=4, algorithm__kind="scaffold", server_optimizer=server, checkpoint={"every": 2})
    )
    whole = Engine(cfg, tmp_path / "whole", tmp_path / "whole.db")
    whole.run()
    cut = Engine(cfg, tmp_path / "cut", tmp_path / "cut.db")
    cut.run(after_round=lambda row: row.round == 1)  # stopped after the checkpoint of round 1
    resumed = Engine(cfg, tmp_path / "cut", tmp_path / "cut.db", resume=True)
    assert resumed.server_step.steps == 2
    resumed.run()
    assert torch.equal(resumed.global_state, whole.global_state)


def test_the_example_optimiser_is_fedams_and_runs_from_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """examples/own_server_optimizer.py's FedAMS against Wang et al.'s Algorithm 2 written out here, then its YAML
    (scaffold with FedAMS, named by factory) run, cut after round 4 and resumed to the same weights."""
    monkeypatch.chdir(ROOT)
    cfg = load_config("examples/own_server_optimizer.yaml", ["checkpoint.every=2"])
    assert cfg.server_optimizer.kind == "fedams" and cfg.algorithm.kind == "scaffold"
    step, x = ServerStep(cfg.server_optimizer, ServerOptimizerContext((2,))), torch.zeros(2)
    m, v, v_hat, expected = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]
    for delta in ([1.0, -0.5], [0.1, 0.2], [-0.3, 0.0]):
        step.apply_(x, MeanUpdate(torch.tensor(delta), 1.0), n_params=2)
        for i, d in enumerate(delta):
            m[i] = 0.9 * m[i] + 0.1 * d
            v[i] = 0.99 * v[i] + 0.01 * d * d
            v_hat[i] = max(v_hat[i], v[i])
            expected[i] += 0.03 * m[i] / (math.sqrt(v_hat[i]) + 1e-3)
    torch.testing.assert_close(x, torch.tensor(expected), rtol=1e-5, atol=1e-7)
    whole = Engine(cfg, tmp_path / "whole", tmp_path / "whole.db")
    summary = whole.run()
    assert summary.final_accuracy > 0.5, summary.final_accuracy  # 10 classes: chance is 0.1
    cut = Engine(cfg, tmp_path / "cut", tmp_path / "cut.db")
    cut.run(after_round=lambda row: row.round == 3)
    resumed = Engine(cfg, tmp_path / "cut", tmp_path / "cut.db", resume=True)
    resumed.run()
    assert torch.equal(resumed.global_state, whole.global_state)
    plan = json.loads((tmp_path / "whole" / "summary.json").read_text())["stages"]
    assert plan[-1]["stage"] == "server_optimizer" and plan[-1]["kind"] == "fedams"


@pytest.mark.slow
def test_the_example_optimiser_runs_from_python(tmp_path: Path) -> None:
    lines = run_example("own_server_optimizer.py", tmp_path)
    assert [line.split(":")[0] for line in lines] == ["fedadam", "fedams"]
    assert all(0.5 < float(line.split("=")[1]) <= 1.0 for line in lines)
