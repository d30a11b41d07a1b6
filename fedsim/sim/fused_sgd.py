"""Local SGD fused into the backward pass of stacked linear layers: the weight-gradient matmul writes the step.

For K clients' stacked copies of a feed-forward network (an ``nn.Sequential`` of linear layers and elementwise
activations: the MLP and logistic regression), a linear layer's backward computes the input gradient
``dY W`` (which needs the weights before the step) and then steps the weights in place,
``W <- W + dY_r^T X`` with ``dY_r`` the output gradient scaled by each client's rate (minus its step size, 0 once
its steps are done): one ``baddbmm_`` instead of a weight-gradient matmul into a new (K, out, in) buffer and
a second pass that reads it back to update the weights.

It is plain SGD, exactly: the same batches, losses and rates as :func:`fedsim.algorithms.sgd.sgd_update_`
with no gradient hook and no weight decay (those keep the general path, which materialises the gradient).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx

# elementwise modules: applied to the stacked (K, B, ...) activations as they are
ELEMENTWISE = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.SiLU, nn.LeakyReLU, nn.Identity)
Layer = Callable[[Tensor, dict[str, Tensor], Tensor], Tensor]  # (activations, stacked params, rates) -> next


class _SgdLinear(torch.autograd.Function):
    """``y = x W^T + b`` over K stacked clients; the backward steps ``W`` and ``b`` in place and returns only the
    input's gradient. The weights are kept on ``ctx`` rather than saved: the step is the one in-place change
    they see, after their last read."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, weight: Tensor, bias: Tensor | None, rate: Tensor) -> Tensor:
        ctx.x, ctx.weight, ctx.bias, ctx.rate = x, weight, bias, rate  # type: ignore[attr-defined]
        out = torch.bmm(x, weight.transpose(1, 2))
        return out if bias is None else out.add_(bias.unsqueeze(1))

    @staticmethod
    def backward(ctx: FunctionCtx, grad_out: Tensor) -> tuple[Tensor | None, None, None, None]:
        x, weight, bias, rate = ctx.x, ctx.weight, ctx.bias, ctx.rate  # type: ignore[attr-defined]
        needs_input_grad: tuple[bool, ...] = ctx.needs_input_grad  # type: ignore[attr-defined]
        grad_x = torch.bmm(grad_out, weight) if needs_input_grad[0] else None  # before the step
        with torch.no_grad():
            scaled = grad_out * rate.view(-1, 1, 1)
            weight.baddbmm_(scaled.transpose(1, 2), x)
            if bias is not None:
                bias.add_(scaled.sum(1))
        return grad_x, None, None, None


def sgd_layers(module: nn.Module) -> list[Layer] | None:
    """``module`` as stacked layers that step themselves, or None when it is not a plain feed-forward stack of
    trainable linear layers (a frozen parameter is not in the flat state the executor stacks)."""
    if not isinstance(module, nn.Sequential) or not all(p.requires_grad for p in module.parameters()):
        return None
    layers: list[Layer] = []
    linear = False
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            layers.append(_linear(f"{name}.weight", f"{name}.bias" if child.bias is not None else None))
            linear = True
        elif isinstance(child, nn.Flatten) and child.start_dim == 1 and child.end_dim == -1:
            layers.append(_flatten)
        elif isinstance(child, ELEMENTWISE):
            layers.append(_elementwise(child))
        else:
            return None
    return layers if linear else None


def _flatten(x: Tensor, params: dict[str, Tensor], rate: Tensor) -> Tensor:
    return x.flatten(2)  # the module's Flatten() keeps dimension 0, the batch; here 0 and 1 are (K, B)


def _elementwise(module: nn.Module) -> Layer:
    def layer(x: Tensor, params: dict[str, Tensor], rate: Tensor) -> Tensor:
        out: Tensor = module(x)
        return out

    return layer


def _linear(weight: str, bias: str | None) -> Layer:
    def layer(x: Tensor, params: dict[str, Tensor], rate: Tensor) -> Tensor:
        out: Tensor = _SgdLinear.apply(x, params[weight], params[bias] if bias else None, rate)
        return out

    return layer


def forward(layers: list[Layer], params: dict[str, Tensor], x: Tensor, rate: Tensor) -> Tensor:
    """The stacked clients' outputs ``(K, B, ...)`` for inputs ``x`` ``(K, B, ...)``; the backward of anything
    computed from them steps ``params`` by ``rate`` (K,)."""
    rate = rate.detach().requires_grad_(True)  # the one input autograd is told to follow: it then records the
    # layers (neither x nor the weights require a gradient); its own gradient is never computed
    for layer in layers:
        x = layer(x, params, rate)
    return x
