"""The thread rule: one thread for a small model whose step is cheap, every core of the rank's share for one
whose step is not, on the three shapes issue 47 names (W1's MLP, pfl's CIFAR10 CNN, pfl's StackOverflow
transformer) and the quickstart's CNN, against a table; each model's FLOPs a step against a count by hand."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from fedsim.cores import cores_per_rank
from fedsim.sim.executors.threads import SMALL_STEP, choose_threads, step_flops


def w1_mlp() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))


def cifar_cnn() -> nn.Module:
    """pfl's simple_cnn on 32x32x3 images (channels first here)."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(14 * 14 * 64, 128), nn.ReLU(), nn.Linear(128, 10),
    )  # fmt: skip


class LmTransformer(nn.Module):
    """pfl's StackOverflow model: 10,004 tokens embedded in 96, three encoder layers of 8 heads and 1,536 wide
    feed-forward, the output tied to the embedding; sequences of 20 tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(10_004, 96)
        layer = nn.TransformerEncoderLayer(96, 8, 1536, 0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 3, enable_nested_tensor=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        return self.encoder(self.embedding(tokens), mask=mask, is_causal=True) @ self.embedding.weight.t()


def quickstart_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Flatten(),
        nn.Linear(32 * 8 * 8, 10),
    )  # fmt: skip


@pytest.fixture(autouse=True)
def restore_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _params(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


SHARE = cores_per_rank(1)
# model, one sample, the batch, the expected threads
TABLE = {
    "w1_mlp": (w1_mlp, torch.zeros(1, 784), 16, 1),
    "cifar10_cnn": (cifar_cnn, torch.zeros(1, 3, 32, 32), 10, SHARE),
    "stackoverflow_transformer": (LmTransformer, torch.zeros(1, 20, dtype=torch.long), 16, SHARE),
    "quickstart_cnn": (quickstart_cnn, torch.zeros(1, 1, 8, 8), 16, 1),
}


@pytest.mark.parametrize("name", list(TABLE))
def test_the_rule_gives_each_shape_its_expected_threads(name: str) -> None:
    build, sample, batch, expected = TABLE[name]
    module = build()
    flops = step_flops(module, sample, batch)
    assert flops is not None
    note = choose_threads(None, _params(module), cuda=False, world=1, flops=flops)
    assert torch.get_num_threads() == expected, note
    assert note.startswith(f"threads: {expected} per rank")


def test_a_step_costs_three_forwards_of_its_batch_counted_by_hand() -> None:
    # W1: two matrix products, 2 * (784 * 128 + 128 * 10) FLOPs a sample forward
    assert step_flops(w1_mlp(), torch.zeros(1, 784), 16) == 3 * 16 * 2 * (784 * 128 + 128 * 10)
    # CIFAR: conv 3->32 at 30x30, conv 32->64 at 28x28 (3x3 kernels), dense 12544->128->10
    forward = 2 * (30 * 30 * 32 * 27 + 28 * 28 * 64 * 288 + 12544 * 128 + 128 * 10)
    assert step_flops(cifar_cnn(), torch.zeros(1, 3, 32, 32), 10) == 3 * 10 * forward
    assert 3 * 10 * forward > SMALL_STEP > 3 * 16 * 2 * (784 * 128 + 128 * 10)  # the threshold sits between


def test_a_model_the_counter_cannot_follow_falls_back_to_its_parameter_count() -> None:
    class Opaque(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("needs a second input")

    module = Opaque()
    assert step_flops(module, torch.zeros(1, 4), 8) is None and module.training
    note = choose_threads(None, _params(module), cuda=False, world=1, flops=None)
    assert torch.get_num_threads() == 1 and "0.00M parameters" in note
    assert math.isfinite(SMALL_STEP)
