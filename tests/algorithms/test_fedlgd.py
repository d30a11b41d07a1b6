"""Federated LGD on the federated round loop: Teng et al.'s pulled step and leader election written once more
here, client by client, over fedsim's own cohorts, with full-batch local steps so the gradients are exact."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.algorithms.fedlgd import GLOBAL, FedLgd, FedLgdConfig
from fedsim.api.launch import execute, final_weights
from fedsim.config import ConfigError, parse_config
from fedsim.data.build import build_dataset
from fedsim.runstore import RunStore
from fedsim.sim.rounds.cohort import sample_cohort
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config
from tests.gossip.test_gossip_rules import full_gradients, full_losses

CLIENTS, COHORT, ROUNDS, LR = 6, 4, 5, 0.1
LOCAL, GLOBAL_PULL, PERIOD, GROUPS = 0.2, 0.3, 2, 2


def fedlgd_config(**overrides: Any) -> dict[str, Any]:
    settings = {"rounds": ROUNDS, "clients_per_round": COHORT, "eval_every": 2, "data__clients": CLIENTS} | overrides
    tree = tiny_config(**settings)
    # each client's whole data in one batch, one epoch: one exact gradient step a round
    tree["algorithm"] = {
        "kind": "fedlgd",
        "lr": LR,
        "batch_size": 4096,
        "local_pull": LOCAL,
        "global_pull": GLOBAL_PULL,
        "period": PERIOD,
        "groups": GROUPS,
    }
    return tree


def test_fedlgd_pulls_each_client_toward_its_leaders_and_adopts_the_elected(tmp_path: Path) -> None:
    cfg = parse_config(fedlgd_config())
    dataset = build_dataset(cfg.data, cfg.seed)
    engine = Engine(cfg, tmp_path / "out", tmp_path / "runs.db", dataset=dataset)
    x_global = engine.global_state.double().clone()
    engine.run()
    own: dict[int, torch.Tensor] = {}
    local: dict[int, torch.Tensor] = {}
    elected = []
    for r in range(ROUNDS):
        losses = {}
        for cid in sample_cohort(cfg.seed, r, CLIENTS, COHORT, 1.0, cfg.sampling):
            if cid in own:  # x_i <- (1 - a - b) x_i + a x_local + b x_global, then its local step
                start = (1 - LOCAL - GLOBAL_PULL) * own[cid] + LOCAL * local.get(cid % GROUPS, x_global)
                start = start + GLOBAL_PULL * x_global
            else:  # a client's first round starts from the global leader
                start = x_global
            losses[cid] = float(full_losses(start[None], dataset, [cid])[0])
            own[cid] = start - LR * full_gradients(start[None], dataset, [cid])[0]
        if (r + 1) % PERIOD == 0:
            best = min(losses, key=lambda c: (losses[c], c))
            for g in range(GROUPS):
                members = [c for c in losses if c % GROUPS == g]
                if members:
                    local[g] = own[min(members, key=lambda c: (losses[c], c))]
            x_global = own[best]
            elected.append(best)
    torch.testing.assert_close(engine.global_state.double(), x_global, rtol=0, atol=2e-5)
    for cid, x in own.items():
        torch.testing.assert_close(engine.store.get(cid)["model"].double(), x, rtol=0, atol=2e-5)  # type: ignore[index]
    with RunStore(tmp_path / "runs.db") as store:
        rows = [json.loads(r.metrics_json) for r in store.rounds(engine.run_id)]
    assert [m.get("leader") for m in rows] == [None, elected[0], None, elected[1], None]


def test_only_leaders_upload_models_and_every_client_a_loss(tmp_path: Path) -> None:
    engine = Engine(parse_config(fedlgd_config()), tmp_path / "out", tmp_path / "runs.db")
    quiet, election = engine.run_round(0), engine.run_round(1)
    engine.close()
    numel = engine.executor.replica.numel
    reports = COHORT * 4 * 2  # each client's loss and its weight, float32
    assert quiet.bytes_up == reports
    leaders = int(json.loads(election.metrics_json)["leaders"])
    assert 1 <= leaders <= GROUPS + 1
    assert election.bytes_up == reports + leaders * 4 * numel
    assert quiet.bytes_down == election.bytes_down == COHORT * 2 * 4 * numel  # the global and the local leader


def test_an_election_takes_the_lowest_loss_per_group_and_of_all() -> None:
    rule = FedLgd(FedLgdConfig(kind="fedlgd", groups=2))
    losses = {0: 0.9, 1: 0.5, 2: 0.7, 3: 0.2, 4: float("nan"), 7: 0.2}
    assert rule.elect(losses) == {0: 2, 1: 3, GLOBAL: 3}  # 3 and 7 tie: the lower client; NaN never leads


@pytest.mark.slow
def test_two_ranks_elect_and_adopt_what_one_rank_does(tmp_path: Path) -> None:
    outs = {}
    for ranks in (1, 2):
        tree = fedlgd_config(devices=2, threads=1, state={"backend": "memory"})
        tree["algorithm"]["batch_size"] = 8  # stochastic batches: each client's own generator, wherever it runs
        outs[ranks] = tmp_path / f"ranks{ranks}"
        execute(parse_config(tree), outs[ranks], tmp_path / "runs.db", ranks=ranks)
    torch.testing.assert_close(final_weights(outs[2]), final_weights(outs[1]), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("section", "value"),
    [
        ("uplink", {"kind": "ef_sign"}),
        ("privacy", {"kind": "central", "clip": 1.0, "noise_multiplier": 1.0}),
        ("attack", {"kind": "sign_flip", "fraction": 0.1}),
    ],
)
def test_sections_over_model_updates_are_refused_in_one_line(section: str, value: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=f"{section}: algorithm.kind=fedlgd adopts its elected leaders' models"):
        parse_config(fedlgd_config() | {section: value})


def test_the_leaders_survive_checkpoint_and_resume(tmp_path: Path) -> None:
    tree = fedlgd_config(rounds=6, state={"backend": "disk"}, checkpoint={"every": 2})
    tree["algorithm"]["batch_size"] = 8
    cfg = parse_config(tree)

    def engine(name: str, resume: bool = False) -> Engine:
        return Engine(cfg, tmp_path / name, tmp_path / f"{name}.db", resume=resume)

    whole = engine("whole")
    whole.run()
    engine("cut").run(after_round=lambda row: row.round == 3)  # after an election: local leaders in the checkpoint
    cut = engine("cut", resume=True)
    cut.run()
    assert torch.equal(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"))
    for cid in range(CLIENTS):  # every client pulled toward its group's leader as if the run had not stopped
        assert torch.equal(cut.store.get(cid)["model"], whole.store.get(cid)["model"])  # type: ignore[index]
