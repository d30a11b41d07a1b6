"""Several ranks (gloo on CPU) give the same answer as one, and clients keep their state when they move."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from fedsim.api.launch import execute, final_weights
from fedsim.config import parse_config
from fedsim.runstore import RunStore
from fedsim.sim.persist import checkpoint
from tests.conftest import tiny_config

# Two ranks sum their clients in two groups and then add the groups: float32 re-association only.
ATOL = 1e-5


def _run(tmp_path: Path, name: str, ranks: int, resume: bool = False, **overrides: Any) -> Path:
    tree = tiny_config(rounds=4, clients_per_round=6, threads=1, devices=2, **overrides)
    tree["scheduler"] = {"kind": "even"}
    out = tmp_path / name
    execute(parse_config(tree), out, tmp_path / "fedsim.db", resume=resume, ranks=ranks)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold"])
def test_two_ranks_match_one(tmp_path: Path, algorithm: str) -> None:
    one = _run(tmp_path, "one", ranks=1, algorithm__kind=algorithm)
    two = _run(tmp_path, "two", ranks=2, algorithm__kind=algorithm)
    a, b = final_weights(one), final_weights(two)
    torch.testing.assert_close(b, a, rtol=0, atol=ATOL)
    assert (a - final_weights(_run(tmp_path, "other", ranks=1, algorithm__kind=algorithm, seed=3))).abs().max() > 1e-3


def dropout_mlp(input_shape: tuple[int, ...], num_classes: int) -> torch.nn.Module:
    """A model with randomness of its own: dropout draws from torch's global generator."""
    width = int(torch.tensor(input_shape).prod())
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(width, 32),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.5),
        torch.nn.Linear(32, num_classes),
    )


@pytest.mark.slow
def test_two_ranks_match_one_with_a_models_own_dropout(tmp_path: Path) -> None:
    """Each client seeds the global generator from its own key, so its masks do not depend on the rank that
    trains it or on the clients before it (before, rank 1's clients drew other masks than in one process)."""
    model = {"kind": "python", "factory": "tests.sim.test_pool:dropout_mlp"}
    one = final_weights(_run(tmp_path, "one", ranks=1, model=model))
    torch.testing.assert_close(final_weights(_run(tmp_path, "two", ranks=2, model=model)), one, rtol=0, atol=ATOL)
    assert (one - final_weights(_run(tmp_path, "other", ranks=1, model=model, seed=3))).abs().max() > 1e-3


@pytest.mark.slow
def test_client_state_follows_the_client_across_ranks(tmp_path: Path) -> None:
    disk: dict[str, Any] = {"state": {"backend": "disk"}}
    one = _run(tmp_path, "one", ranks=1, algorithm__kind="scaffold", **disk)
    two = _run(tmp_path, "two", ranks=2, algorithm__kind="scaffold", **disk)
    with RunStore.open_readonly(tmp_path / "fedsim.db") as store:
        run_id = store.list_runs()[0].run_id
        rows = store.client_runs(run_id)
    devices_of: dict[int, set[int]] = {}
    for row in rows:
        devices_of.setdefault(row.client, set()).add(row.device)
    movers = [cid for cid, devs in devices_of.items() if len(devs) > 1]
    assert movers, "the even split should move some client between the two devices"
    for cid in movers:
        a = load_file(one / "state" / f"client-{cid}.safetensors")["c"]
        b = load_file(two / "state" / f"client-{cid}.safetensors")["c"]
        torch.testing.assert_close(b, a, rtol=0, atol=ATOL * 100)  # c_i is a delta divided by K*lr
    torch.testing.assert_close(final_weights(two), final_weights(one), rtol=0, atol=ATOL)


@pytest.mark.slow
def test_two_ranks_evaluate_their_shards_to_the_same_accuracy(tmp_path: Path) -> None:
    """Each rank scores every second test example; one all-reduce adds the counts up."""
    one = _run(tmp_path, "eval-one", ranks=1)
    two = _run(tmp_path, "eval-two", ranks=2)
    a = json.loads((one / "summary.json").read_text())
    b = json.loads((two / "summary.json").read_text())
    assert b["final_accuracy"] == pytest.approx(a["final_accuracy"], abs=1 / 360)  # one test image at most
    assert b["final_loss"] == pytest.approx(a["final_loss"], rel=1e-4)
    assert 0.1 < b["final_accuracy"] <= 1.0


@pytest.mark.slow
def test_a_pool_resumes_a_stateful_run_on_disk_to_the_same_weights(tmp_path: Path) -> None:
    """Rank 0 checkpoints every client file in the directory the ranks share, those only rank 1 ever trained
    included, and no rank overwrites one before rank 0 has frozen the round (a cache of 0 writes every state
    through at once). Before, the checkpoint held only the clients rank 0 had seen, and the resumed SCAFFOLD run
    ended 0.03 away from the uninterrupted one."""
    keep: dict[str, Any] = {"state": {"backend": "disk", "cache_mb": 0}, "checkpoint": {"every": 1, "keep": 10}}
    straight = _run(tmp_path, "straight", ranks=2, algorithm__kind="scaffold", **keep)
    first, *later = checkpoint.complete(straight / "checkpoints")
    assert [p.name for p in later] == ["ckpt-000001", "ckpt-000002"]
    with RunStore.open_readonly(tmp_path / "fedsim.db") as store:
        rows = store.client_runs(store.list_runs()[0].run_id)
    assert {row.device for row in rows if row.round == 0} == {0, 1}  # both ranks trained clients in round 0
    trained = {f"client-{row.client}.safetensors" for row in rows if row.round == 0}
    assert {p.name for p in (first / "state").iterdir()} == trained

    resumed = tmp_path / "resumed"
    shutil.copytree(straight, resumed, ignore=shutil.ignore_patterns("summary.json", "model.safetensors"))
    for path in later:
        shutil.rmtree(resumed / "checkpoints" / path.name)
    _run(tmp_path, "resumed", ranks=2, resume=True, algorithm__kind="scaffold", **keep)
    assert torch.equal(final_weights(resumed), final_weights(straight))
