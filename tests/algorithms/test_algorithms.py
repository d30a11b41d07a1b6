"""Algorithm identities and hand-computed server steps."""

from __future__ import annotations

import torch

from fedsim.algorithms import REGISTRY, build_algorithm
from fedsim.algorithms.scaffold import Scaffold, ScaffoldConfig
from tests.conftest import RunFactory, tiny_config


def test_registry_covers_every_configurable_algorithm() -> None:
    federated = {"fedavg", "fedprox", "fednova", "scaffold", "ditto", "fedlgd"}  # fedadam & co: server_optimizer
    assert set(REGISTRY) == federated | {"dpsgd", "dmsgd", "decentlam", "lgd"}  # decentralised: no server
    assert build_algorithm(ScaffoldConfig(kind="scaffold"), num_clients=7).name == "scaffold"


def test_fednova_with_equal_local_steps_equals_fedavg(run_engine: RunFactory) -> None:
    fedavg = run_engine(tiny_config(algorithm__local_steps=3))
    nova = run_engine(tiny_config(algorithm__kind="fednova", algorithm__local_steps=3))
    torch.testing.assert_close(nova.global_state, fedavg.global_state, rtol=0, atol=1e-6)
    # with uneven epochs (different client sizes) the normalisation changes the result
    uneven = run_engine(tiny_config(algorithm__kind="fednova", algorithm__local_epochs=2))
    plain = run_engine(tiny_config(algorithm__local_epochs=2))
    assert (uneven.global_state - plain.global_state).abs().max() > 1e-4


def test_scaffold_server_control_is_the_mean_of_client_controls(run_engine: RunFactory) -> None:
    engine = run_engine(tiny_config(rounds=3, clients_per_round=10, algorithm__kind="scaffold"))
    algo = engine.algorithm
    assert isinstance(algo, Scaffold) and algo.c is not None
    client_cs = []
    for cid in range(10):
        state = engine.store.get(cid)
        assert state is not None
        client_cs.append(state["c"])
    torch.testing.assert_close(algo.c, torch.stack(client_cs).mean(0), rtol=0, atol=1e-5)
    assert algo.c.abs().max() > 1e-3
    clone = Scaffold(ScaffoldConfig(kind="scaffold"), 10)
    clone.load_state_dict(algo.state_dict())
    assert clone.c is not None and torch.equal(clone.c, algo.c)


def test_ditto_personal_models_follow_lambda(run_engine: RunFactory) -> None:
    def gap(lam: float) -> float:
        engine = run_engine(tiny_config(rounds=2, clients_per_round=10, algorithm__kind="ditto", algorithm__lam=lam))
        state = engine.store.get(0)
        assert state is not None
        return float((state["personal"] - engine.global_state).norm())

    loose, tight = gap(0.0), gap(9.0)
    assert loose > 2 * tight > 0
