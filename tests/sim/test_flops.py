"""fedsim's FLOP counter against torch's own (``FlopCounterMode``, a second implementation at the dispatcher
level) and against counts by hand; and counting imports none of torch's compiler stack, which torch's counter
does (3 s of every CPU run's start-up, before this counter)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from fedsim.models.flops import forward_flops
from tests.sim.test_threads import TABLE, LmTransformer


class Products(nn.Module):
    """Every matrix product form a model's own forward might use."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 6))
        self.b = nn.Parameter(torch.randn(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (4, 3, 8)
        y = x @ self.w  # (4, 3, 6)
        y = y + torch.matmul(x, self.w) + x.matmul(self.w)
        z = torch.bmm(y, y.transpose(1, 2))  # (4, 3, 3)
        z = torch.baddbmm(z, z, z)
        flat = torch.addmm(self.b, x[0], self.w)  # (3, 6)
        return z.sum() + flat.sum() + torch.mm(x[0], self.w).sum()


class CrossAttention(nn.Module):
    def __init__(self, batch_first: bool) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(16, 2, batch_first=batch_first)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x[:3], x[:3])[0]  # with its weights: torch then counts the attention too


class Sdpa(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (2, 4, 5, 8): batch, heads, tokens, width
        return nn.functional.scaled_dot_product_attention(x, x[:, :, :3], x[:, :, :3, :6])


CASES = {
    **{name: (build, sample) for name, (build, sample, _, _) in TABLE.items() if name != "stackoverflow_transformer"},
    "conv1d": (lambda: nn.Sequential(nn.Conv1d(4, 8, 5, groups=2), nn.Conv1d(8, 3, 1)), torch.zeros(2, 4, 30)),
    "conv3d": (lambda: nn.Conv3d(2, 4, 3, stride=2), torch.zeros(1, 2, 9, 9, 9)),
    "conv_transpose2d": (lambda: nn.ConvTranspose2d(6, 4, 3, stride=2, groups=2), torch.zeros(2, 6, 7, 7)),
    "products": (Products, torch.zeros(4, 3, 8)),
    "cross_attention": (lambda: CrossAttention(batch_first=False), torch.zeros(5, 2, 16)),
    "cross_attention_unbatched": (lambda: CrossAttention(batch_first=False), torch.zeros(5, 16)),
}


def _torch_count(module: nn.Module, sample: torch.Tensor) -> int:
    module.eval()
    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)  # the fused inference path hides its products from torch's too
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            module(sample)
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)
    return int(counter.get_total_flops())


@pytest.mark.parametrize("name", list(CASES))
def test_the_count_is_torchs(name: str) -> None:
    build, sample = CASES[name]
    assert forward_flops(build(), sample) == _torch_count(build(), sample) > 0


def test_attention_counts_its_scores_and_weighted_sum_by_hand() -> None:
    # 2 x 4 heads x 5 queries x 3 keys x (8 + 6); torch's counter has no formula for the CPU kernel it runs
    assert forward_flops(Sdpa(), torch.zeros(2, 4, 5, 8)) == 2 * 2 * 4 * 5 * 3 * (8 + 6)


def test_the_transformer_counts_by_hand() -> None:
    length, width, hidden, vocabulary, layers = 20, 96, 1536, 10_004, 3
    projections = 2 * width * width * 4 * length  # q, k, v and the output, each token
    attention = 4 * length * length * width  # scores and the weighted sum over all heads
    feed_forward = 2 * 2 * length * width * hidden
    total = layers * (projections + attention + feed_forward) + 2 * length * width * vocabulary
    sample = torch.zeros(1, length, dtype=torch.long)
    assert forward_flops(LmTransformer(), sample) == total
    # torch's counter gives the same less the attention, for which it has no CPU formula (above)
    assert _torch_count(LmTransformer(), sample) == total - layers * attention


def test_the_module_is_left_training_and_the_fast_path_as_it_was() -> None:
    module = LmTransformer().train()
    forward_flops(module, torch.zeros(1, 20, dtype=torch.long))
    assert module.training and torch.backends.mha.get_fastpath_enabled()


def test_counting_imports_no_compiler() -> None:
    code = (
        "import sys, torch\n"
        "from fedsim.models.flops import forward_flops\n"
        "from tests.sim.test_threads import LmTransformer, cifar_cnn\n"
        "forward_flops(cifar_cnn(), torch.zeros(1, 3, 32, 32))\n"
        "forward_flops(LmTransformer(), torch.zeros(1, 20, dtype=torch.long))\n"
        "print(sorted(m for m in ('torch._dynamo', 'torch._inductor', 'sympy') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
