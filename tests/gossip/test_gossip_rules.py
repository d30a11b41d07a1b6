"""D-PSGD, DmSGD and DecentLaM as the round loop runs them are their papers' update rules, written here once more
in matrix form over all nodes at once (X the nodes' models as rows, W the mixing matrix, G their gradients)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from fedsim.algorithms.gossip import GossipConfig
from fedsim.config import ConfigError, SpellingNote, parse_config
from fedsim.data.base import FederatedDataset
from fedsim.data.blocks import ClientBlocks
from fedsim.data.build import build_dataset
from fedsim.data.holdout import LocalHoldout
from fedsim.decentralised.gossip import GossipEngine
from fedsim.decentralised.topology import Topology
from fedsim.runstore import RunStore
from tests.conftest import tiny_config

NODES, ROUNDS, LR, BETA = 6, 4, 0.1, 0.9
MOMENTUM = ("dmsgd", "decentlam")


def gossip_config(name: str, kind: str = "ring", **overrides: Any) -> dict[str, Any]:
    tree = tiny_config(rounds=ROUNDS, clients_per_round=None, eval_every=2, data__clients=NODES, **overrides)
    tree.pop("clients_per_round")
    # every node's whole data in its one batch: the gradient is then the full one, which the reference computes
    tree["algorithm"] = {"kind": name, "lr": LR, "batch_size": 4096} | ({"momentum": BETA} if name in MOMENTUM else {})
    tree["topology"] = {"kind": kind}
    return tree


def full_gradients(x: torch.Tensor, dataset: FederatedDataset, clients: list[int] | None = None) -> torch.Tensor:
    """Each node's gradient of its mean cross-entropy, for logistic regression (weight rows, then bias): the
    textbook formula, (softmax - onehot)^T [a 1] / n; row k is node k's, or ``clients[k]``'s."""
    classes, rows = dataset.num_classes, []
    for k, i in enumerate(clients or range(x.shape[0])):
        data = dataset.client(i)
        a = data.x.reshape(data.n_samples, -1).double()
        weight = x[k, : classes * a.shape[1]].view(classes, a.shape[1])
        bias = x[k, classes * a.shape[1] :]
        err = torch.softmax(a @ weight.T + bias, 1) - F.one_hot(data.y, classes).double()
        rows.append(torch.cat([(err.T @ a).flatten(), err.sum(0)]) / data.n_samples)
    return torch.stack(rows)


def reference(name: str, w: torch.Tensor, x: torch.Tensor, dataset: FederatedDataset) -> torch.Tensor:
    m = torch.zeros_like(x)
    for _ in range(ROUNDS):
        g = full_gradients(x, dataset)
        if name == "dpsgd":  # Lian et al. 2017: x_i <- sum_j W_ij x_j - lr g_i(x_i)
            x = w @ x - LR * g
        elif name == "dmsgd":  # m <- beta m + g;  x <- W (x - lr m)
            m = BETA * m + g
            x = w @ (x - LR * m)
        else:  # DecentLaM: m <- beta m + g + (x - W x) / lr;  x <- x - lr m
            m = BETA * m + g + (x - w @ x) / LR
            x = x - LR * m
    return x


@pytest.mark.parametrize("name", ["dpsgd", "dmsgd", "decentlam"])
@pytest.mark.parametrize("kind", ["ring", "exponential"])
def test_each_rule_is_its_papers_update_in_matrix_form(name: str, kind: str, tmp_path: Path) -> None:
    cfg = parse_config(gossip_config(name, kind))
    dataset = build_dataset(cfg.data, cfg.seed)
    engine = GossipEngine(cfg, tmp_path / "out", tmp_path / "runs.db", dataset=dataset)
    start = engine.initial.double()
    engine.run()
    store = engine.store  # closed, but a memory store still answers
    got = torch.stack([store.get(i)["x"].double() for i in range(NODES)])  # type: ignore[index]
    w = Topology.build(cfg.topology, NODES).dense()
    want = reference(name, w, start.expand(NODES, -1).clone(), dataset)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-5)
    torch.testing.assert_close(engine.average.double(), want.mean(0), rtol=0, atol=2e-5)
    consensus = (want - want.mean(0)).square().sum(1).mean().item()
    assert engine.consensus == pytest.approx(consensus, rel=1e-3, abs=1e-9)


def test_a_node_sends_its_model_to_each_neighbour_and_the_ledger_charges_it(tmp_path: Path) -> None:
    cfg = parse_config(gossip_config("dpsgd", "ring"))
    engine = GossipEngine(cfg, tmp_path / "out", tmp_path / "runs.db")
    row = engine.run_round(0)
    numel = engine.replica.numel
    assert row.bytes_up == row.bytes_down == NODES * 2 * 4 * numel  # two neighbours on a ring, float32
    engine.close()


@pytest.mark.parametrize(
    ("tree", "words"),
    [
        (tiny_config(algorithm__kind="decentlam"), "algorithm.kind=decentlam gossips between neighbours: set"),
        (tiny_config(topology={"kind": "ring"}), "topology.kind=ring needs a decentralised algorithm"),
        (gossip_config("dmsgd") | {"uplink": {"kind": "ef_sign"}}, "uplink: a decentralised run"),
        (gossip_config("dpsgd") | {"clients_per_round": 3}, "clients_per_round: a decentralised run"),
    ],
)
def test_settings_a_decentralised_run_cannot_have_are_one_line(tree: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_config(tree)


@pytest.mark.parametrize(
    ("setting", "value"),
    [("local_steps", 5), ("local_epochs", 2), ("client_optimizer", {"momentum": 0.9}), ("weighting", "uniform")],
)
def test_a_gossip_rule_has_no_local_training_of_a_federated_client(setting: str, value: object) -> None:
    """A node takes one gradient a round by its own rule: local steps, a client optimiser and an aggregation
    weight are a federated client's, and its config has none of them (format 2: no old spelling to drop)."""
    tree = {**gossip_config("decentlam"), "format": 2}
    tree["algorithm"] = {**tree["algorithm"], setting: value}
    allowed = "allowed here: lr, batch_size, lr_schedule, kind, factory, weight_decay, momentum"
    with pytest.raises(ConfigError, match=rf"^unknown key 'algorithm\.{setting}'; {allowed}$"):
        parse_config(tree)


def test_a_saved_gossip_config_drops_the_client_settings_it_held_at_their_defaults() -> None:
    """config.json of a gossip run from before held every federated client's setting at its default."""
    tree = gossip_config("decentlam")
    held = {"local_epochs": 1, "local_steps": None, "local_momentum": 0.0, "optimizer": "sgd", "weighting": "samples"}
    tree["algorithm"] = {**tree["algorithm"], **held, "weight_decay": 0.001}
    with pytest.warns(SpellingNote, match=r"algorithm\.\{local_epochs, local_steps, local_momentum, optimizer,"):
        cfg = parse_config(tree)
    assert isinstance(cfg.algorithm, GossipConfig) and cfg.algorithm.weight_decay == 0.001
    tree["algorithm"]["local_steps"] = 5  # set, not a default: it stays, and is refused
    with pytest.warns(SpellingNote), pytest.raises(ConfigError, match=r"unknown key 'algorithm\.local_steps'"):
        parse_config(tree)


def test_lgd_is_lsgd_pulled_toward_local_and_global_leaders(tmp_path: Path) -> None:
    """Teng et al.'s multi-leader step, in matrix form: every ``period`` rounds each node is pulled toward its
    group's lowest-loss node and the lowest-loss node of all; between elections it takes its own step."""
    local, global_, period, groups = 0.2, 0.3, 2, 2
    tree = gossip_config("lgd")
    del tree["topology"]
    tree["algorithm"] |= {"local_pull": local, "global_pull": global_, "period": period, "groups": groups}
    cfg = parse_config(tree)
    dataset = build_dataset(cfg.data, cfg.seed)
    engine = GossipEngine(cfg, tmp_path / "out", tmp_path / "runs.db", dataset=dataset)
    x = engine.initial.double().expand(NODES, -1).clone()
    engine.run()
    leaders = []
    for r in range(ROUNDS):
        g = full_gradients(x, dataset)
        if (r + 1) % period:
            x = x - LR * g
            continue
        losses = full_losses(x, dataset)
        best = int(losses.argmin())
        w = torch.eye(NODES, dtype=torch.float64) * (1 - local - global_)
        for i in range(NODES):
            group = [j for j in range(NODES) if j * groups // NODES == i * groups // NODES]
            w[i, min(group, key=lambda j: float(losses[j]))] += local
            w[i, best] += global_
        x = w @ x - LR * g
        leaders.append(best)
    got = torch.stack([engine.store.get(i)["x"].double() for i in range(NODES)])  # type: ignore[index]
    torch.testing.assert_close(got, x, rtol=0, atol=2e-5)
    with RunStore(tmp_path / "runs.db") as store:
        rows = [json.loads(r.metrics_json) for r in store.rounds(engine.run_id)]
    assert [m.get("leader") for m in rows] == [None, leaders[0], None, leaders[1]]
    assert rows[1]["leader"] is not None and rows[0].get("leader") is None


def full_losses(x: torch.Tensor, dataset: FederatedDataset, clients: list[int] | None = None) -> torch.Tensor:
    classes, losses = dataset.num_classes, []
    for k, i in enumerate(clients or range(x.shape[0])):
        data = dataset.client(i)
        a = data.x.reshape(data.n_samples, -1).double()
        weight = x[k, : classes * a.shape[1]].view(classes, a.shape[1])
        losses.append(F.cross_entropy(a @ weight.T + x[k, classes * a.shape[1] :], data.y))
    return torch.stack(losses)


def test_lgd_bytes_are_the_leaders_models_and_the_losses(tmp_path: Path) -> None:
    tree = gossip_config("lgd")
    del tree["topology"]
    tree["algorithm"] |= {"groups": 2, "period": 2}
    engine = GossipEngine(parse_config(tree), tmp_path / "out", tmp_path / "runs.db")
    quiet, election = engine.run_round(0), engine.run_round(1)
    engine.close()
    assert quiet.bytes_up == quiet.bytes_down == 0  # between elections nothing travels
    senders = json.loads(election.metrics_json)["leader"]
    assert isinstance(senders, int)
    models = election.bytes_down // (4 * engine.replica.numel)
    assert election.bytes_up == election.bytes_down + 4 * NODES  # the same models, and every node's loss
    assert NODES - 1 <= models <= 2 * (NODES - 1)  # the global leader to all, each local leader to its group


def test_lgd_takes_no_topology() -> None:
    tree = gossip_config("lgd")
    with pytest.raises(ConfigError, match=r"algorithm\.kind=lgd mixes with its leaders, not over topology\.kind=ring"):
        parse_config(tree)
    del tree["topology"]
    tree["algorithm"] |= {"local_pull": 0.6, "global_pull": 0.5}
    with pytest.raises(ConfigError, match=r"local_pull \+ global_pull = 1\.1 exceeds 1"):
        parse_config(tree)


def test_lgd_groups_nodes_by_device_unless_told_otherwise() -> None:
    from fedsim.algorithms.lgd import Lgd, LgdConfig

    losses = [0.9, 0.5, 0.7, 0.2, 0.8, 0.6]  # devices 0: nodes 0, 2, 4 (best 2); 1: nodes 1, 3, 5 (best 3)
    rule = Lgd(LgdConfig(kind="lgd", local_pull=0.2, global_pull=0.3))
    rows = rule.rows(losses, devices=2)
    assert rows[4] == [(2, 0.2), (3, 0.3), (4, 0.5)]  # its device's leader, the global leader, itself
    assert rows[5] == [(3, 0.5), (5, 0.5)]  # node 3 leads both its device and all
    blocks = Lgd(LgdConfig(kind="lgd", local_pull=0.2, global_pull=0.3, groups=2)).rows(losses, devices=2)
    assert blocks[0] == [(0, 0.5), (1, 0.2), (3, 0.3)]  # nodes 0-2 are a block: node 1 leads it


def test_nodes_as_blocks_of_clients_train_on_their_blocks_data(tmp_path: Path) -> None:
    """``topology.nodes``: device groups or regions as nodes, each a contiguous block of clients and their data."""
    tree = gossip_config("dpsgd", "ring")
    tree["topology"]["nodes"] = 4  # 6 clients: blocks [0], [1, 2], [3], [4, 5]
    cfg = parse_config(tree)
    dataset = build_dataset(cfg.data, cfg.seed)
    engine = GossipEngine(cfg, tmp_path / "out", tmp_path / "runs.db", dataset=dataset)
    start = engine.initial.double()
    engine.run()
    blocks = ClientBlocks(dataset, 4)
    for g, members in enumerate([[0], [1, 2], [3], [4, 5]]):
        assert list(blocks.members(g)) == members
        torch.testing.assert_close(blocks.client(g).x, torch.cat([dataset.client(c).x for c in members]))
    held = LocalHoldout(dataset, 0.2, 0)  # not an ArrayDataset: its clients' data concatenated, not one view
    assert torch.equal(ClientBlocks(held, 4).client(3).y, torch.cat([held.client(4).y, held.client(5).y]))
    assert ClientBlocks(held, 4).n_samples(3) == held.n_samples(4) + held.n_samples(5)
    got = torch.stack([engine.store.get(g)["x"].double() for g in range(4)])  # type: ignore[index]
    want = reference("dpsgd", Topology.build(cfg.topology, 4).dense(), start.expand(4, -1).clone(), blocks)
    torch.testing.assert_close(got, want, rtol=0, atol=2e-5)


@pytest.mark.parametrize(
    ("nodes", "algorithm", "words"),
    [(7, "dpsgd", r"topology\.nodes=7 exceeds data\.clients=6"), (3, "fedavg", "topology.nodes is a decentralised")],
)
def test_nodes_that_cannot_be_are_one_line(nodes: int, algorithm: str, words: str) -> None:
    tree = gossip_config("dpsgd", "ring")
    tree["topology"] = {"kind": "ring" if algorithm == "dpsgd" else "none", "nodes": nodes}
    tree["algorithm"]["kind"] = algorithm
    with pytest.raises(ConfigError, match=words):
        parse_config(tree)
