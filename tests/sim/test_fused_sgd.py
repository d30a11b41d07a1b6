"""The SGD step inside a stacked linear layer's backward: the paper-free formula written out, and where it applies."""

from __future__ import annotations

import torch
from torch import nn

from fedsim.sim import fused_sgd


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
    out = fused_sgd.forward(layers, params, x, rate)
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
    fused_sgd.forward(layers, {"0.weight": w.clone()}, x, torch.tensor([-1.0, -1.0])).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, torch.ones(2, 3, 4) @ w)


def test_only_trainable_feed_forward_stacks_take_the_fused_step() -> None:
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 2))
    assert fused_sgd.sgd_layers(mlp) is not None
    assert fused_sgd.sgd_layers(nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(2, 2))) is None
    assert fused_sgd.sgd_layers(nn.Sequential(nn.ReLU())) is None  # nothing to step
    assert fused_sgd.sgd_layers(nn.Linear(3, 2)) is None  # not a Sequential: its forward is its own
    mlp[1].weight.requires_grad_(False)
    assert fused_sgd.sgd_layers(mlp) is None  # a frozen layer is not in the stacked state
