"""Algorithm identities and hand-computed server steps."""

from __future__ import annotations

import pytest
import torch

from fedsim.algorithms import REGISTRY, build_algorithm
from fedsim.algorithms.fedopt import FedAdam, FedAdamConfig, FedAvgM, FedAvgMConfig, FedYogi
from fedsim.algorithms.scaffold import Scaffold, ScaffoldConfig
from tests.conftest import RunFactory, tiny_config


def test_registry_covers_every_configurable_algorithm() -> None:
    federated = {"fedavg", "fedprox", "fednova", "scaffold", "ditto", "fedadam", "fedyogi", "fedavgm", "fedlgd"}
    assert set(REGISTRY) == federated | {"dpsgd", "dmsgd", "decentlam", "lgd"}  # decentralised: no server
    assert build_algorithm(ScaffoldConfig(name="scaffold"), num_clients=7).name == "scaffold"


def test_fednova_with_equal_local_steps_equals_fedavg(run_engine: RunFactory) -> None:
    fedavg = run_engine(tiny_config(algorithm__local_steps=3))
    nova = run_engine(tiny_config(algorithm__name="fednova", algorithm__local_steps=3))
    torch.testing.assert_close(nova.global_state, fedavg.global_state, rtol=0, atol=1e-6)
    # with uneven epochs (different client sizes) the normalisation changes the result
    uneven = run_engine(tiny_config(algorithm__name="fednova", algorithm__local_epochs=2))
    plain = run_engine(tiny_config(algorithm__local_epochs=2))
    assert (uneven.global_state - plain.global_state).abs().max() > 1e-4


def test_scaffold_server_control_is_the_mean_of_client_controls(run_engine: RunFactory) -> None:
    engine = run_engine(tiny_config(rounds=3, clients_per_round=10, algorithm__name="scaffold"))
    algo = engine.algorithm
    assert isinstance(algo, Scaffold) and algo.c is not None
    client_cs = []
    for cid in range(10):
        state = engine.store.get(cid)
        assert state is not None
        client_cs.append(state["c"])
    torch.testing.assert_close(algo.c, torch.stack(client_cs).mean(0), rtol=0, atol=1e-5)
    assert algo.c.abs().max() > 1e-3
    clone = Scaffold(ScaffoldConfig(name="scaffold"), 10)
    clone.load_state_dict(algo.state_dict())
    assert clone.c is not None and torch.equal(clone.c, algo.c)


def test_ditto_personal_models_follow_lambda(run_engine: RunFactory) -> None:
    def gap(lam: float) -> float:
        engine = run_engine(tiny_config(rounds=2, clients_per_round=10, algorithm__name="ditto", algorithm__lam=lam))
        state = engine.store.get(0)
        assert state is not None
        return float((state["personal"] - engine.global_state).norm())

    loose, tight = gap(0.0), gap(9.0)
    assert loose > 2 * tight > 0


def _sums(delta: list[float]) -> dict[str, torch.Tensor]:
    return {"delta": torch.tensor(delta) * 2.0, "weight": torch.tensor([2.0]), "clients": torch.tensor([2.0])}


def test_fedadam_step_by_hand() -> None:
    algo = FedAdam(FedAdamConfig(name="fedadam", server_lr=0.1, beta1=0.9, beta2=0.99, tau=0.01))
    x = torch.zeros(2)
    algo.server_update(x, _sums([1.0, -2.0]), n_params=2)
    m = torch.tensor([0.1, -0.2])
    v = 0.99 * 1e-4 + 0.01 * torch.tensor([1.0, 4.0])
    torch.testing.assert_close(x, 0.1 * m / (v.sqrt() + 0.01))
    restored = FedAdam(FedAdamConfig(name="fedadam"))
    restored.load_state_dict(algo.state_dict())
    assert restored.v is not None and torch.equal(restored.v, v)


def test_fedyogi_second_moment_by_hand() -> None:
    algo = FedYogi(FedAdamConfig(name="fedyogi", server_lr=1.0, beta1=0.0, beta2=0.9, tau=0.5))
    x = torch.zeros(1)
    algo.server_update(x, _sums([2.0]), n_params=1)
    v = 0.25 - 0.1 * 4.0 * -1.0  # v0 = tau^2 = 0.25 < D^2 = 4: v grows additively
    torch.testing.assert_close(x, torch.tensor([2.0 / (v**0.5 + 0.5)]))


def test_fedavgm_momentum_by_hand() -> None:
    algo = FedAvgM(FedAvgMConfig(name="fedavgm", server_lr=1.0, momentum=0.5))
    x = torch.zeros(1)
    algo.server_update(x, _sums([1.0]), n_params=1)
    algo.server_update(x, _sums([1.0]), n_params=1)
    assert x.item() == pytest.approx(1.0 + 1.5)


def test_fedopt_averages_buffers_without_the_optimiser() -> None:
    algo = FedAvgM(FedAvgMConfig(name="fedavgm", server_lr=3.0, momentum=0.0))
    x = torch.zeros(3)
    algo.server_update(x, _sums([1.0, 1.0, 0.5]), n_params=2)  # last entry is a BatchNorm statistic
    assert x.tolist() == [3.0, 3.0, 0.5]
