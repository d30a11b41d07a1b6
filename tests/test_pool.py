"""The fast 2x2 max-pool gives torch's values and gradients, ties included, eagerly and under vmap."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import grad, vmap

from fedsim.config import parse_config
from fedsim.models import build_model, pool
from fedsim.models.pool import MaxPool2x2, max_pool_2x2
from tests.conftest import tiny_config


def _maps(shape: tuple[int, ...]) -> torch.Tensor:
    """ReLU outputs (ties at zero everywhere) with positive ties planted in the first windows."""
    x = torch.relu(torch.randn(*shape, generator=torch.Generator().manual_seed(0)))
    x[0, 0, 0, :3] = 5.0  # three equal maxima in the first window's top row and the next window
    x[0, 0, 1, 0] = 5.0
    x[0, 1, 0, 0] = x[0, 1, 1, 1] = 7.0  # a diagonal tie
    x[0, 1, 0, 3] = x[0, 1, 1, 2] = 9.0  # an anti-diagonal tie
    return x


@pytest.mark.parametrize(
    "shape",
    [(16, 16, 28, 28), (16, 32, 14, 14), (2, 3, 29, 31), (16, 16, 8, 8), (4, 8, 33, 33)],
)
@pytest.mark.parametrize("threshold", [0, 2**62], ids=["channels-last", "torch"])
def test_values_and_gradients_are_torchs(
    shape: tuple[int, ...], threshold: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pool, "CHANNELS_LAST_FROM", threshold)  # each path, whatever this machine's threads
    x = _maps(shape).requires_grad_(True)
    upstream = torch.randn(F.max_pool2d(x, 2).shape, generator=torch.Generator().manual_seed(1))
    want = F.max_pool2d(x, 2)
    got = MaxPool2x2()(x)
    assert torch.equal(got, want)
    (want_grad,) = torch.autograd.grad(want, x, upstream)
    (got_grad,) = torch.autograd.grad(got, x, upstream)
    assert torch.equal(got_grad, want_grad)  # each window's gradient on the same (first) maximum
    assert got_grad.is_contiguous()  # the layer below gets its gradient in the layout it gave


@pytest.mark.parametrize(
    ("threads", "shape", "fast"),
    [
        (1, (16, 16, 28, 28), True),
        (1, (8, 16, 28, 28), True),
        (1, (4, 16, 28, 28), False),
        (1, (16, 16, 8, 8), False),
        (2, (16, 16, 28, 28), True),
        (2, (8, 16, 28, 28), False),  # torch's kernel on two threads beats the copies to channels-last
    ],
)
def test_the_channels_last_kernel_takes_the_maps_it_wins_on_for_the_threads(
    threads: int, shape: tuple[int, ...], fast: bool
) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        assert pool._fast(torch.empty(shape)) is fast
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("threshold", [0, 2**62], ids=["channels-last", "torch"])
def test_under_vmap_the_pool_and_its_gradients_are_torchs(threshold: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "CHANNELS_LAST_FROM", threshold)
    xs = torch.relu(torch.randn(3, 16, 4, 16, 16, generator=torch.Generator().manual_seed(2)))
    assert torch.equal(vmap(max_pool_2x2)(xs), vmap(lambda z: F.max_pool2d(z, 2))(xs))
    assert torch.equal(
        vmap(grad(lambda z: max_pool_2x2(z).square().sum()))(xs),
        vmap(grad(lambda z: F.max_pool2d(z, 2).square().sum()))(xs),
    )
    moved = xs.movedim(0, 1).contiguous()  # the vmapped dimension second
    assert torch.equal(vmap(max_pool_2x2, in_dims=1)(moved), vmap(lambda z: F.max_pool2d(z, 2), in_dims=1)(moved))


def test_the_zoo_cnn_pools_with_it() -> None:
    model = build_model(parse_config(tiny_config(model={"kind": "cnn"})).model, (64,), 10, seed=0)
    assert sum(isinstance(m, MaxPool2x2) for m in model.modules()) == 2
    assert not any(isinstance(m, torch.nn.MaxPool2d) for m in model.modules())
