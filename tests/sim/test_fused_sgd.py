"""The SGD step inside a stacked linear layer's backward: the paper-free formula written out, and where it applies."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedsim.sim.executors import fused_sgd


def test_a_step_is_w_minus_rate_times_the_weight_gradient_per_client() -> None:
    g = torch.Generator().manual_seed(0)
    k, b, fan_in, fan_out = 3, 5, 7, 4
    x = torch.randn(k, b, fan_in, generator=g)
    w, bias = torch.randn(k, fan_out, fan_in, generator=g), torch.randn(k, fan_out, generator=g)
    target = torch.randn(k, b, fan_out, generator=g)
    rate = torch.tensor([-0.1, -0.05, 0.0])  # the third client has taken all its steps
    params = {"0.weight": w.clone(), "0.bias": bias.clone()}
    layers = fused_sgd.sgd_layers(nn.Sequential(nn.Linear(fan_in, fan_out)))
    assert layers is not None
    out = fused_sgd.forward(layers, fused_sgd.Stack(params), x, rate)
    ((out - target) ** 2).sum().backward()
    # the direct form: dL/dY = 2 (Y - T), dL/dW_k = dY_k^T X_k, dL/db_k = sum over the batch of dY_k
    dy = 2 * (torch.bmm(x, w.transpose(1, 2)) + bias[:, None] - target)
    expected_w = w + rate[:, None, None] * torch.bmm(dy.transpose(1, 2), x)
    expected_b = bias + rate[:, None] * dy.sum(1)
    torch.testing.assert_close(params["0.weight"], expected_w)
    torch.testing.assert_close(params["0.bias"], expected_b)
    torch.testing.assert_close(params["0.weight"][2], w[2], rtol=0, atol=0)  # a rate of 0 leaves it as it was


def test_the_input_gradient_uses_the_weights_before_their_step() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 6, generator=g, requires_grad=True)
    w = torch.randn(2, 4, 6, generator=g)
    layers = fused_sgd.sgd_layers(nn.Sequential(nn.Linear(6, 4, bias=False)))
    assert layers is not None
    fused_sgd.forward(layers, fused_sgd.Stack({"0.weight": w.clone()}), x, torch.tensor([-1.0, -1.0])).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, torch.ones(2, 3, 4) @ w)


@pytest.mark.parametrize("spare", [False, True])
def test_a_shared_start_gives_each_client_its_own_step_and_leaves_the_shared_weights_alone(spare: bool) -> None:
    """The global model, without the K dimension, is every client's first weights: the first step writes K
    copies (into the spare buffers when given), the same as stepping K stacked copies of it."""
    g = torch.Generator().manual_seed(2)
    k, b = 3, 4
    model = nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 2))
    shared = {name: p.detach().clone() for name, p in model.named_parameters()}
    x, target = torch.randn(k, b, 5, generator=g), torch.randn(k, b, 2, generator=g)
    rate = torch.tensor([-0.1, -0.2, 0.0])
    layers = fused_sgd.sgd_layers(model)
    assert layers is not None
    buffers = {name: torch.full((k, *p.shape), float("nan")) for name, p in shared.items()} if spare else {}
    start = {name: p.clone() for name, p in shared.items()}  # the global model's memory: never written
    stack = fused_sgd.Stack(dict(start), buffers)
    stacked = fused_sgd.Stack({name: p.expand(k, *p.shape).contiguous() for name, p in shared.items()})
    for params in (stack, stacked):
        for _ in range(2):  # the shared first step, then one in place
            ((fused_sgd.forward(layers, params, x, rate) - target) ** 2).sum().backward()
    for name, p in shared.items():
        assert stack.params[name].shape == (k, *p.shape)
        torch.testing.assert_close(stack.params[name], stacked.params[name], rtol=0, atol=1e-6)
        torch.testing.assert_close(stack.params[name][2], p, rtol=0, atol=0)  # a rate of 0: still the start
        assert torch.equal(start[name], p)
        if spare:
            assert stack.params[name].data_ptr() == buffers[name].data_ptr()
    assert not torch.equal(stack.params["0.weight"][0], shared["0.weight"])


def test_the_input_gradient_of_a_shared_weight_is_the_same_for_every_client() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 6, generator=g, requires_grad=True)
    w = torch.randn(4, 6, generator=g)
    layers = fused_sgd.sgd_layers(nn.Sequential(nn.Linear(6, 4, bias=False)))
    assert layers is not None
    stack = fused_sgd.Stack({"0.weight": w.clone()})
    fused_sgd.forward(layers, stack, x, torch.tensor([-1.0, -1.0])).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, torch.ones(2, 3, 4) @ w)
    torch.testing.assert_close(stack.params["0.weight"], w - torch.ones(2, 4, 3) @ x.detach())


def test_only_trainable_feed_forward_stacks_take_the_fused_step() -> None:
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    assert fused_sgd.sgd_layers(mlp) is not None
    assert fused_sgd.sgd_layers(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2, 2))) is None
    assert fused_sgd.sgd_layers(nn.Sequential(nn.ReLU())) is None  # nothing to step
    assert fused_sgd.sgd_layers(nn.Linear(3, 2)) is None  # not a Sequential: its forward is its own
    mlp[1].weight.requires_grad_(False)
    assert fused_sgd.sgd_layers(mlp) is None  # a frozen layer is not in the stacked state
