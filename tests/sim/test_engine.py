"""The round loop, checked against numbers a researcher would check by hand."""

from __future__ import annotations

import json

import numpy as np
import torch
import torch.nn.functional as F

from fedsim.data.base import ArrayDataset, ClientData
from fedsim.models import build_model
from fedsim.runstore import RunStore
from fedsim.tasks.evaluate import evaluate
from tests.conftest import RunFactory, tiny_config


def _one_client_dataset(n: int = 40, features: int = 6, classes: int = 3) -> ArrayDataset:
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(n, features, generator=gen)
    y = torch.randint(0, classes, (n,), generator=gen)
    test = ClientData(x[:5], y[:5])
    return ArrayDataset(x.numpy(), y.numpy(), [np.arange(n)], test, num_classes=classes)


def test_fedavg_one_client_one_full_batch_step_equals_centralised_sgd(run_engine: RunFactory) -> None:
    dataset = _one_client_dataset()
    tree = tiny_config(
        rounds=1,
        clients_per_round=1,
        data__clients=1,
        model__kind="mlp",
        model__hidden=[8],
        algorithm__local_steps=1,
        algorithm__batch_size=40,
        algorithm__lr=0.3,
    )
    engine = run_engine(tree, dataset)

    reference = build_model(engine.cfg.model, (6,), 3, seed=0)
    opt = torch.optim.SGD(reference.parameters(), lr=0.3)
    data = dataset.client(0)
    opt.zero_grad()
    F.cross_entropy(reference(data.x), data.y).backward()
    opt.step()
    expected = torch.cat([p.detach().reshape(-1) for p in reference.parameters()])
    torch.testing.assert_close(engine.global_state, expected, rtol=0, atol=1e-6)
    initial = torch.cat([p.detach().reshape(-1) for p in build_model(engine.cfg.model, (6,), 3, seed=0).parameters()])
    assert (engine.global_state - initial).abs().max() > 1e-3  # the step moved the model


def test_fedprox_with_mu_zero_equals_fedavg_bit_for_bit(run_engine: RunFactory) -> None:
    fedavg = run_engine(tiny_config(rounds=3))
    fedprox = run_engine(tiny_config(rounds=3, algorithm__kind="fedprox", algorithm__mu=0.0))
    assert torch.equal(fedavg.global_state, fedprox.global_state)
    stronger = run_engine(tiny_config(rounds=3, algorithm__kind="fedprox", algorithm__mu=1.0))
    assert not torch.equal(fedavg.global_state, stronger.global_state)


def test_scaffold_reaches_lower_training_loss_than_fedavg_on_synthetic(run_engine: RunFactory) -> None:
    def train_loss(name: str) -> float:
        tree = tiny_config(
            rounds=20,
            clients_per_round=10,
            eval_every=0,
            data={"dataset": "synthetic", "alpha": 1, "beta": 1, "clients": 30},
            algorithm={"kind": name, "lr": 0.01, "local_epochs": 5, "batch_size": 10},
        )
        engine = run_engine(tree)
        ds = engine.dataset
        pooled = ClientData(
            torch.cat([ds.client(i).x for i in range(ds.num_clients)]),
            torch.cat([ds.client(i).y for i in range(ds.num_clients)]),
        )
        return evaluate(engine.executor.replica, engine.global_state, pooled, 4096).loss

    fedavg, scaffold = train_loss("fedavg"), train_loss("scaffold")
    # measured at seed 0: fedavg 1.04, scaffold 0.59
    assert scaffold < 0.8 * fedavg, (fedavg, scaffold)


def test_same_seed_same_weights_other_seed_other_weights(run_engine: RunFactory) -> None:
    a = run_engine(tiny_config(algorithm__kind="scaffold"))
    b = run_engine(tiny_config(algorithm__kind="scaffold"))
    c = run_engine(tiny_config(algorithm__kind="scaffold", seed=1))
    assert torch.equal(a.global_state, b.global_state)
    assert not torch.equal(a.global_state, c.global_state)


def test_disk_and_memory_state_stores_give_identical_runs(run_engine: RunFactory) -> None:
    for name in ("scaffold", "ditto"):
        tree = tiny_config(rounds=4, clients_per_round=4, algorithm__kind=name)
        memory = run_engine(tree)
        disk = run_engine({**tree, "state": {"backend": "disk", "cache_mb": 0.01}})
        assert torch.equal(memory.global_state, disk.global_state)
        assert disk.store.disk_bytes() > 0 and memory.store.disk_bytes() == 0
        assert len(disk.store) == len(memory.store) > 4  # clients return across rounds with their state
        for cid in range(10):
            m, d = memory.store.get(cid), disk.store.get(cid)
            assert (m is None) == (d is None)
            if m is not None and d is not None:
                assert all(torch.equal(m[k], d[k]) for k in m)


def test_run_store_and_summary_hold_every_round(run_engine: RunFactory) -> None:
    engine = run_engine(tiny_config(rounds=4, eval_every=2))
    summary = json.loads((engine.out_dir / "summary.json").read_text())
    with RunStore.open_readonly(engine.out_dir / "fedsim.db") as store:
        run = store.get_run(summary["run_id"])
        rounds = store.rounds(summary["run_id"])
        clients = store.client_runs(summary["run_id"])
    assert run is not None and run.status == "finished" and run.rounds_done == 4
    assert [r.round for r in rounds] == [0, 1, 2, 3]
    assert [r.test_accuracy is not None for r in rounds] == [False, True, False, True]
    assert rounds[-1].test_accuracy == summary["final_accuracy"]
    assert len(clients) == 4 * 5 and all(c.end >= c.start for c in clients)
    assert sum(r.samples or 0 for r in rounds) == summary["samples"]
    assert sum(r.bytes_up for r in rounds) == summary["bytes_up"] == 4 * 5 * (650 + 1) * 4


def test_a_one_rank_stateful_run_keeps_nothing_per_client_outside_the_store(run_engine: RunFactory) -> None:
    """The owner map steers a client to the rank holding its state; on one rank it would only grow with the
    clients seen (to the population, in a long cross-device run) and steer nothing."""
    engine = run_engine(tiny_config(rounds=3, clients_per_round=5, algorithm__kind="scaffold"))
    assert len(engine.store) >= 5 and engine.owner == {}  # the clients that trained keep their state
