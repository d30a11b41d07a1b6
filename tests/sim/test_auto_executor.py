"""``executor.kind: auto`` on a CPU trains a convolutional model one client at a time where its maps are large."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch import nn

from fedsim.config import parse_config
from fedsim.models.replica import Replica
from fedsim.sim.executors.choice import FUSED_CONV_VALUES, sequential_is_faster
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config


@pytest.fixture(autouse=True)
def _threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _engine(tmp_path: Path, side: int, threads: int, kind: str = "auto") -> Engine:
    tree = tiny_config(
        threads=threads,
        clients_per_round=4,
        data={"dataset": "random", "clients": 4, "samples_per_client": 8, "features": side * side, "test_samples": 4},
        model={"kind": "cnn", "channels": [16, 32], "groups": 4},
        executor={"kind": kind, "clients": 4},
    )
    return Engine(parse_config(tree), out_dir=tmp_path / "out", db_path=tmp_path / "runs.db")


@pytest.mark.parametrize(
    ("side", "threads", "kind"),
    [
        (8, 1, "fused"),  # 16 x 8 x 8 = 1,024 values a sample out of the first convolution
        (16, 1, "fused"),  # 4,096: the limit on one thread
        (17, 1, "sequential"),  # 4,624
        (20, 2, "fused"),  # 6,400 against 8,192 on two threads
        (28, 2, "sequential"),  # 12,544: an MNIST image
    ],
)
def test_auto_fuses_a_cnn_only_while_its_largest_map_per_thread_is_small(
    side: int, threads: int, kind: str, tmp_path: Path
) -> None:
    assert FUSED_CONV_VALUES == 4096
    assert _engine(tmp_path, side, threads).executor_kind == kind


def test_an_explicit_fused_executor_is_kept_for_large_maps(tmp_path: Path) -> None:
    assert _engine(tmp_path, 28, 1, kind="fused").executor_kind == "fused"


def test_the_measuring_pass_leaves_the_model_and_the_global_random_state_alone() -> None:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.Dropout(0.5), nn.Flatten(), nn.Linear(16 * 400, 2))
    replica, sample = Replica(module), torch.randn(3, 1, 20, 20)
    before, state = replica.flat.clone(), torch.random.get_rng_state()
    torch.set_num_threads(1)
    assert sequential_is_faster(replica, sample)  # 6,400 > 4,096
    torch.set_num_threads(2)
    assert not sequential_is_faster(replica, sample)  # 6,400 <= 8,192
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(replica.flat, before)
    assert not module[0]._forward_hooks  # the hooks are gone
    assert not sequential_is_faster(Replica(nn.Sequential(nn.Linear(4, 2))), torch.zeros(1, 4))  # no convolution
