"""Client optimisers: SGD with momentum/Nesterov, Adam and AdamW take torch.optim's steps; their state is reset
each round or kept per client in the state store; learning rates follow their schedules over rounds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from fedsim.algorithms.base import ClientContext, ClientState
from fedsim.algorithms.fedavg import FedAvgConfig
from fedsim.algorithms.local_sgd import local_sgd
from fedsim.config import ConfigError, LrSchedule, local_training, parse_config
from fedsim.config.algorithm import parse_algorithm
from fedsim.data.base import ClientData
from fedsim.models import Replica, build_model
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config


def _ctx(seed: int, round_idx: int = 0, state: ClientState | None = None) -> ClientContext:
    return ClientContext(0, round_idx, torch.zeros(1), 1.0, torch.Generator().manual_seed(seed), optimizer_state=state)


def _model() -> torch.nn.Module:
    return build_model(parse_config(tiny_config()).model, (64,), 10, seed=0)


def _data() -> ClientData:
    gen = torch.Generator().manual_seed(1)
    return ClientData(torch.randn(20, 64, generator=gen, device="cpu"), torch.randint(0, 10, (20,), generator=gen))


def _torch_reference(model: torch.nn.Module, opt: torch.optim.Optimizer, data: ClientData, seed: int) -> torch.Tensor:
    order = torch.Generator().manual_seed(seed)
    for _ in range(3):
        perm = torch.randperm(20, generator=order, device="cpu")
        for lo in range(0, 20, 8):
            batch = perm[lo : lo + 8]
            opt.zero_grad()
            F.cross_entropy(model(data.x[batch]), data.y[batch]).backward()
            opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize(
    ("settings", "make"),
    [
        ({"momentum": 0.9}, lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
        (
            {"momentum": 0.9, "nesterov": True},
            lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
        ),
        ({"kind": "adam", "weight_decay": 0.01}, lambda ps: torch.optim.Adam(ps, lr=0.1, weight_decay=0.01)),
        (
            {"kind": "adamw", "betas": (0.8, 0.99), "weight_decay": 0.05},
            lambda ps: torch.optim.AdamW(ps, lr=0.1, betas=(0.8, 0.99), weight_decay=0.05),
        ),
    ],
)
def test_client_optimizer_takes_torch_steps(settings: dict[str, Any], make: Any) -> None:
    cfg = local_training(
        parse_algorithm({"kind": "fedavg", "lr": 0.1, "batch_size": 8, "local_epochs": 3, "client_optimizer": settings})
    )
    data = _data()
    reference = _model()
    replica = Replica(_model())
    local_sgd(replica, data, cfg, _ctx(7))
    want = _torch_reference(reference, make(reference.parameters()), data, 7)
    torch.testing.assert_close(replica.params, want, rtol=0, atol=2e-6)
    plain = Replica(_model())
    local_sgd(plain, data, FedAvgConfig(kind="fedavg", lr=0.1, batch_size=8, local_epochs=3), _ctx(7))
    assert (plain.params - replica.params).abs().max() > 1e-3  # the optimiser changed the path


class WithUnused(torch.nn.Module):
    def __init__(self, body: torch.nn.Module) -> None:
        super().__init__()
        self.body, self.unused = body, torch.nn.Linear(3, 2)  # forward never reaches ``unused``
        with torch.no_grad():  # fixed values, not the global generator's
            self.unused.weight.copy_(torch.linspace(-1.0, 1.0, 6).view(2, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.body(x)
        return out


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_plain_sgd_takes_torch_steps_and_leaves_an_unused_parameter_alone(weight_decay: float) -> None:
    """Plain SGD steps with autograd's gradients directly (weight decay through the flat gradient); a parameter
    the loss never reaches gets a zero gradient, as backward into a zeroed buffer gave it."""
    plain = {"weight_decay": weight_decay}
    cfg = local_training(
        parse_algorithm({"kind": "fedavg", "lr": 0.1, "batch_size": 8, "local_epochs": 3, "client_optimizer": plain})
    )
    data = _data()
    reference, model = _model(), WithUnused(_model())
    replica = Replica(model)
    unused = model.unused.weight.detach().clone()
    local_sgd(replica, data, cfg, _ctx(7))
    sgd = torch.optim.SGD(reference.parameters(), lr=0.1, weight_decay=weight_decay)
    want = _torch_reference(reference, sgd, data, 7)
    n = want.numel()
    torch.testing.assert_close(replica.params[:n], want, rtol=0, atol=2e-6)
    expected_unused = unused * (1 - 0.1 * weight_decay) ** 9  # 3 epochs of 3 steps: decay alone moves it
    torch.testing.assert_close(model.unused.weight.detach(), expected_unused, rtol=0, atol=1e-6)
    assert weight_decay == 0 or not torch.equal(model.unused.weight.detach(), unused)


def test_kept_adam_state_continues_where_the_client_left_off() -> None:
    """Two rounds with the state kept equal one torch.optim.Adam run over both rounds' batches (from the same
    starting weights); with the state reset they do not."""
    adam = {"kind": "adam"}
    cfg = local_training(
        parse_algorithm({"kind": "fedavg", "lr": 0.05, "batch_size": 8, "local_epochs": 3, "client_optimizer": adam})
    )
    data = _data()
    replica = Replica(_model())
    state: ClientState = {}
    local_sgd(replica, data, cfg, _ctx(7, 0, state))
    assert sorted(state) == ["optimizer.exp_avg", "optimizer.exp_avg_sq", "optimizer.step"]
    assert float(state["optimizer.step"]) == 9.0
    local_sgd(replica, data, cfg, _ctx(8, 1, state))

    reference = _model()
    opt = torch.optim.Adam(reference.parameters(), lr=0.05)
    _torch_reference(reference, opt, data, 7)
    want = _torch_reference(reference, opt, data, 8)
    torch.testing.assert_close(replica.params, want, rtol=0, atol=2e-6)

    reset = Replica(_model())
    local_sgd(reset, data, cfg, _ctx(7))
    local_sgd(reset, data, cfg, _ctx(8, 1))
    assert (reset.params - replica.params).abs().max() > 1e-4


def test_optimizer_state_lives_in_the_state_store(tmp_path: Path) -> None:
    tree = tiny_config(
        rounds=2,
        clients_per_round=10,
        algorithm={"kind": "fedavg", "lr": 0.01, "client_optimizer": {"kind": "adam", "state": "client"}},
    )
    engine = Engine(parse_config(tree), out_dir=tmp_path / "o", db_path=tmp_path / "r.db")
    engine.run()
    assert len(engine.store) == parse_config(tree).data.clients
    state = engine.store.get(0)
    assert state is not None and float(state["optimizer.step"]) > 0
    reset = Engine(
        parse_config(
            tiny_config(rounds=2, algorithm={"kind": "fedavg", "client_optimizer": {"kind": "adam"}, "lr": 0.01})
        ),
        out_dir=tmp_path / "p",
        db_path=tmp_path / "r.db",
    )
    reset.run()
    assert len(reset.store) == 0
    assert not torch.equal(engine.global_state, reset.global_state)


def test_schedules() -> None:
    step = LrSchedule(kind="step", every=2, gamma=0.5)
    assert [step.factor(r) for r in range(5)] == [1.0, 1.0, 0.5, 0.5, 0.25]
    cosine = LrSchedule(kind="cosine", rounds=4, min_factor=0.1, warmup_rounds=1)
    assert cosine.factor(0) == 0.5 and cosine.factor(1) == 1.0
    assert cosine.factor(3) == pytest.approx(0.55) and cosine.factor(5) == pytest.approx(0.1)
    assert cosine.factor(50) == pytest.approx(0.1)
    cfg = FedAvgConfig(kind="fedavg", lr=0.2, lr_schedule=LrSchedule(kind="exponential", gamma=0.5))
    assert cfg.client_lr(3) == pytest.approx(0.025)


def test_client_lr_schedule_changes_the_run_and_a_server_schedule_too(tmp_path: Path) -> None:
    def final(out: str, server: str = "sgd", schedule: Any = None, **algorithm: Any) -> torch.Tensor:
        lr = {"sgd": 1.0}.get(server, 0.01)  # the plain step at lr 1 has no schedule to follow: 0.9 does
        server_optimizer = {"kind": server, "lr": 0.9 if schedule and server == "sgd" else lr}
        tree = tiny_config(
            rounds=3, algorithm=algorithm, server_optimizer=server_optimizer | {"schedule": schedule or {}}
        )
        engine = Engine(parse_config(tree), out_dir=tmp_path / out, db_path=tmp_path / "r.db")
        engine.run()
        return engine.global_state

    flat = final("flat", kind="fedavg")
    decayed = final("decayed", kind="fedavg", lr_schedule={"kind": "step", "every": 1, "gamma": 0.5})
    assert not torch.equal(flat, decayed)
    same = final("same", kind="fedavg", lr_schedule={"kind": "step", "every": 10, "gamma": 0.5})
    assert torch.equal(flat, same)  # a schedule whose first step is after the run changes nothing
    for name, server in (("fedavg", "fedadam"), ("fedavg", "sgd"), ("scaffold", "sgd"), ("fednova", "adam")):
        plain = final(name, kind=name, server=server)
        decay = final(f"{name}-decay", kind=name, server=server, schedule={"kind": "exponential", "gamma": 0.5})
        assert not torch.equal(plain, decay), name


def test_optimizer_settings_are_checked_and_refused_where_they_do_not_fuse(tmp_path: Path) -> None:
    def client(**settings: Any) -> dict[str, Any]:
        return tiny_config(algorithm={"kind": "fedavg", "client_optimizer": settings}, format=2)

    with pytest.raises(ConfigError, match=r"client_optimizer\.nesterov needs client_optimizer\.momentum > 0"):
        parse_config(client(nesterov=True))
    with pytest.raises(ConfigError, match=r"algorithm\.client_optimizer\.momentum: Input should be less than 1"):
        parse_config(client(momentum=1.0))
    with pytest.raises(
        ConfigError, match=r"unknown key 'algorithm\.client_optimizer\.momentum'; allowed here: .*betas"
    ):
        parse_config(client(kind="adam", momentum=0.5))
    with pytest.raises(
        ConfigError, match=r"unknown key 'algorithm\.client_optimizer\.betas'; allowed here: .*momentum"
    ):
        parse_config(client(betas=[0.8, 0.9]))
    with pytest.raises(ConfigError, match=r"algorithm\.client_optimizer.*'sgd', 'adam', 'adamw', 'eva'"):
        parse_config(client(kind="lion"))
    with pytest.raises(ConfigError, match=r"client_optimizer\.state=client keeps SGD momentum or Adam moments"):
        parse_config(client(state="client"))
    with pytest.raises(ConfigError, match="cosine schedule needs rounds"):
        parse_config(tiny_config(algorithm={"kind": "fedavg", "lr_schedule": {"kind": "cosine"}}))
    with pytest.raises(ConfigError, match=r"algorithm\.lr"):
        parse_config(tiny_config(algorithm={"kind": "fedavg", "lr": float("inf")}))
    refused: list[tuple[dict[str, Any], str]] = [
        ({"momentum": 0.5}, r"client momentum \(client_optimizer.momentum\) is not fused"),
        ({"kind": "adamw"}, "the client optimiser adamw is not fused yet"),
    ]
    for settings, reason in refused:
        tree = tiny_config(algorithm={"kind": "fedavg", "client_optimizer": settings}, executor={"kind": "fused"})
        with pytest.raises(ConfigError, match=rf"executor\.kind=fused: {reason}"):
            Engine(parse_config(tree), out_dir=tmp_path / "o", db_path=tmp_path / "r.db")
