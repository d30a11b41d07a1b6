"""Decentralised runs: two ranks give one rank's models, the run store and summary.json say what gossip did,
and the command line refuses what a decentralised run cannot do in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from fedsim.api.launch import execute, final_weights
from fedsim.cli import main
from fedsim.config import ConfigError, parse_config
from fedsim.decentralised.gossip import GossipEngine
from fedsim.runstore import RunStore
from fedsim.sim.persist.interrupted import RunInterrupted
from tests.gossip.test_gossip_rules import gossip_config


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_two_ranks_give_one_ranks_models(tmp_path: Path, backend: str) -> None:
    outs = {}
    for ranks in (1, 2):
        tree = gossip_config("decentlam", "exponential", devices=2, threads=1, state={"backend": backend})
        tree["algorithm"]["batch_size"] = 8  # a stochastic batch: each node's own generator, wherever it runs
        outs[ranks] = tmp_path / f"ranks{ranks}"
        execute(parse_config(tree), outs[ranks], tmp_path / "runs.db", ranks=ranks)
    one, two = final_weights(outs[1]), final_weights(outs[2])
    torch.testing.assert_close(two, one, rtol=0, atol=1e-6)
    a, b = (json.loads((outs[k] / "summary.json").read_text()) for k in (1, 2))
    assert b["consensus_distance"] == pytest.approx(a["consensus_distance"], rel=1e-4)
    assert a["bytes_up"] == b["bytes_up"] > 0 and b["bytes_moved"] > 0 == a["bytes_moved"]


@pytest.mark.slow
def test_two_ranks_give_one_ranks_models_with_a_models_own_dropout(tmp_path: Path) -> None:
    """Each node seeds torch's global generator from its own key before its gradient, so its dropout masks do
    not depend on the rank it runs on or the nodes before it there."""
    outs = {}
    for ranks, seed in ((1, 0), (2, 0), (1, 3)):
        tree = gossip_config("decentlam", "exponential", devices=2, threads=1, seed=seed)
        tree["model"] = {"kind": "python", "factory": "tests.sim.test_pool:dropout_mlp"}
        outs[ranks, seed] = tmp_path / f"ranks{ranks}-seed{seed}"
        execute(parse_config(tree), outs[ranks, seed], tmp_path / "runs.db", ranks=ranks)
    one, two = final_weights(outs[1, 0]), final_weights(outs[2, 0])
    torch.testing.assert_close(two, one, rtol=0, atol=1e-6)
    assert (one - final_weights(outs[1, 3])).abs().max() > 1e-3  # another seed, another run: no accident


def test_the_run_store_has_consensus_and_every_node_each_round(tmp_path: Path) -> None:
    out, db = tmp_path / "out", tmp_path / "runs.db"
    summary = execute(parse_config(gossip_config("dmsgd", "ring")), out, db)
    fields = json.loads((out / "summary.json").read_text())
    assert fields["topology"] == "ring" and fields["executor"] == "gossip" and fields["algorithm"] == "dmsgd"
    with RunStore(db) as store:
        rounds = store.rounds(summary.run_id)
        clients = store.client_runs(summary.run_id, round=0)
    assert [r.round for r in rounds] == [0, 1, 2, 3]
    consensus = [json.loads(r.metrics_json)["consensus_distance"] for r in rounds]
    assert consensus[0] > 0 and all(c >= 0 for c in consensus)
    assert sorted(c.client for c in clients) == list(range(6))
    assert rounds[1].test_accuracy is not None and rounds[0].test_accuracy is None  # eval_every 2


def test_a_topology_with_a_federated_algorithm_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = gossip_config("dpsgd")
    tree["algorithm"] = {"kind": "fedavg"}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(tree))
    with pytest.raises(SystemExit) as exit_:
        main(["run", str(path), "--out", str(tmp_path / "out"), "--db", str(tmp_path / "runs.db")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert "topology.kind=ring needs a decentralised algorithm" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("backend", ["memory", "disk"])
def test_a_stopped_decentralised_run_resumes_as_if_never_stopped(tmp_path: Path, backend: str) -> None:
    tree = gossip_config("decentlam", "ring", state={"backend": backend}, checkpoint={"every": 2})
    tree["rounds"] = 6
    tree["algorithm"]["batch_size"] = 8  # stochastic batches: each node's own generator, round by round
    cfg = parse_config(tree)

    def engine(name: str, resume: bool = False) -> GossipEngine:
        return GossipEngine(cfg, tmp_path / name, tmp_path / f"{name}.db", resume=resume)

    whole = engine("whole")
    whole.run()
    engine("cut").run(after_round=lambda row: row.round == 2)  # its last checkpoint: after round 1
    cut = engine("cut", resume=True)
    assert cut.next_round == 2
    cut.run()
    assert torch.equal(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"))
    for node in range(6):  # every node's model and momentum, as if the run had not stopped
        a, b = cut.store.get(node), whole.store.get(node)
        assert a is not None and b is not None
        assert torch.equal(a["x"], b["x"]) and torch.equal(a["m"], b["m"])
    a, b = (json.loads((tmp_path / n / "summary.json").read_text()) for n in ("cut", "whole"))
    assert a["bytes_up"] == b["bytes_up"] and a["consensus_distance"] == b["consensus_distance"]
    with RunStore(tmp_path / "cut.db") as store:
        assert [r.round for r in store.rounds(cut.run_id)] == list(range(6))  # round 2 once, after the resume


def test_checkpoints_of_a_decentralised_run_on_two_ranks_are_one_line(tmp_path: Path) -> None:
    """Refused before any rank starts: one line, exit 2, nothing written (a rank raising it printed a
    traceback of torch's spawn)."""
    config = tmp_path / "gossip.yaml"
    config.write_text(yaml.safe_dump(gossip_config("dpsgd", "ring", devices=2, checkpoint={"every": 2})))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "fedsim.cli", "run", str(config), "--out", str(out), "--db", str(tmp_path / "f.db")]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    words = "checkpoint.every=2: a decentralised run checkpoints on one rank only, not 2"
    assert (done.returncode, done.stderr.count("\n")) == (2, 1) and words in done.stderr, done.stderr
    assert not out.exists()


def test_an_interrupted_decentralised_run_checkpoints_the_round_it_stopped_after_and_says_how_to_resume(
    tmp_path: Path,
) -> None:
    cfg = parse_config(gossip_config("dmsgd", "ring", checkpoint={"every": 2}))

    def ctrl_c(row: object) -> None:
        if getattr(row, "round", 0) == 2:
            raise KeyboardInterrupt

    engine = GossipEngine(cfg, tmp_path / "out", tmp_path / "runs.db")
    with pytest.raises(RunInterrupted, match=r"interrupted after round 3; newest checkpoint .*ckpt-000002"):
        engine.run(after_round=ctrl_c)
    with RunStore(tmp_path / "runs.db") as store:
        info = store.get_run(engine.run_id)
        assert info is not None and info.status == "interrupted"


@pytest.mark.parametrize("name", ["dpsgd", "decentlam"])
def test_fused_gossip_equals_sequential_within_float_summation_order(tmp_path: Path, name: str) -> None:
    """K nodes' gradients at once (executor.kind: fused, 3 at a time over 10 nodes: uneven groups) give the
    sequential run's nodes, average model and consensus distance within 1e-5; a CNN, stochastic batches of 8 of
    unequal client sizes (padded, masked), weight decay."""
    engines = {}
    for kind in ("sequential", "fused"):
        tree = gossip_config(name, "exponential", model={"kind": "cnn", "channels": [4, 8], "groups": 2})
        tree["algorithm"] |= {"batch_size": 8, "weight_decay": 0.001}
        tree["executor"] = {"kind": kind, "clients": 3}
        engines[kind] = GossipEngine(parse_config(tree), tmp_path / kind, tmp_path / f"{kind}.db")
        engines[kind].run()
    sequential, fused = engines["sequential"], engines["fused"]
    assert (fused.average - sequential.average).abs().max() <= 1e-5
    for i in range(sequential.topology.n):
        a, b = sequential.store.get(i), fused.store.get(i)
        assert a is not None and b is not None and (a["x"] - b["x"]).abs().max() <= 1e-5, i
    assert fused.consensus == pytest.approx(sequential.consensus, rel=1e-4)
    assert fused.summary().final_accuracy == pytest.approx(sequential.summary().final_accuracy, abs=1e-3)
    assert json.loads((tmp_path / "fused" / "summary.json").read_text())["executor"] == "fused"


def test_fused_gossip_refuses_a_model_with_batchnorm_statistics(tmp_path: Path) -> None:
    tree = gossip_config("dpsgd", model={"kind": "cnn", "channels": [4, 8], "norm": "batch"})
    tree["executor"] = {"kind": "fused"}
    with pytest.raises(ConfigError, match=r"^executor\.kind=fused: the model has \d+ float buffer values"):
        GossipEngine(parse_config(tree), tmp_path / "out", tmp_path / "runs.db")
