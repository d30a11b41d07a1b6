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
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx

# elementwise modules: applied to the stacked (K, B, ...) activations as they are
ELEMENTWISE = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU, nn.SiLU, nn.LeakyReLU, nn.Identity)


@dataclass
class Stack:
    """K clients' parameters by name: each (K, *shape), or still shared, the global one without the K dimension,
    until the first step gives each client its own copy, written into ``spare[name]`` where there is one (a
    (K, *shape) buffer kept from an earlier group: no fresh pages to fault in) and into new memory otherwise."""

    params: dict[str, Tensor]
    spare: dict[str, Tensor] = field(default_factory=dict)


Layer = Callable[[Tensor, Stack, Tensor], Tensor]  # (activations, the clients' parameters, rates) -> next


class _SgdLinear(torch.autograd.Function):
    """``y = x W^T + b`` over K stacked clients; the backward steps ``W`` and ``b`` and returns only the input's
    gradient. The weights are kept on ``ctx`` rather than saved: the step is the one change they see, after their
    last read. A weight still shared by the K clients is multiplied once for all of them, and its first step
    writes the clients' own copies (:class:`Stack`); after that the step is in place."""

    @staticmethod
    def forward(ctx: FunctionCtx, x: Tensor, rate: Tensor, stack: Stack, weight: str, bias: str | None) -> Tensor:
        ctx.x, ctx.rate, ctx.stack, ctx.names = x, rate, stack, (weight, bias)  # type: ignore[attr-defined]
        w = stack.params[weight]
        if w.dim() == 2:  # shared: one product over all K clients' rows
            out = torch.mm(x.flatten(0, 1), w.t()).view(*x.shape[:2], w.shape[0])
        else:
            out = torch.bmm(x, w.transpose(1, 2))
        if bias is None:
            return out
        b = stack.params[bias]
        return out.add_(b if b.dim() == 1 else b.unsqueeze(1))

    @staticmethod
    def backward(ctx: FunctionCtx, grad_out: Tensor) -> tuple[Tensor | None, None, None, None, None]:
        x, rate, stack, (weight, bias) = ctx.x, ctx.rate, ctx.stack, ctx.names  # type: ignore[attr-defined]
        needs_input_grad: tuple[bool, ...] = ctx.needs_input_grad  # type: ignore[attr-defined]
        params, spare = stack.params, stack.spare
        w = params[weight]
        grad_x = None
        if needs_input_grad[0]:  # before the step
            grad_x = torch.matmul(grad_out, w) if w.dim() == 2 else torch.bmm(grad_out, w)
        with torch.no_grad():
            scaled = grad_out * rate.view(-1, 1, 1)
            if w.dim() == 2:  # the clients' own copies start here: the step writes them
                shared = w.expand(x.shape[0], *w.shape)
                params[weight] = torch.baddbmm(shared, scaled.transpose(1, 2), x, out=spare.get(weight))
            else:
                w.baddbmm_(scaled.transpose(1, 2), x)
            if bias is not None:
                b = params[bias]
                if b.dim() == 1:
                    params[bias] = torch.add(b, scaled.sum(1), out=spare.get(bias))
                else:
                    b.add_(scaled.sum(1))
        return grad_x, None, None, None, None


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


def _flatten(x: Tensor, stack: Stack, rate: Tensor) -> Tensor:
    return x.flatten(2)  # the module's Flatten() keeps dimension 0, the batch; here 0 and 1 are (K, B)


def _elementwise(module: nn.Module) -> Layer:
    def layer(x: Tensor, stack: Stack, rate: Tensor) -> Tensor:
        out: Tensor = module(x)
        return out

    return layer


def _linear(weight: str, bias: str | None) -> Layer:
    def layer(x: Tensor, stack: Stack, rate: Tensor) -> Tensor:
        out: Tensor = _SgdLinear.apply(x, rate, stack, weight, bias)
        return out

    return layer


def forward(layers: list[Layer], stack: Stack, x: Tensor, rate: Tensor) -> Tensor:
    """The stacked clients' outputs ``(K, B, ...)`` for inputs ``x`` ``(K, B, ...)``; the backward of anything
    computed from them steps ``stack``'s parameters by ``rate`` (K,)."""
    rate = rate.detach().requires_grad_(True)  # the one input autograd is told to follow: it then records the
    # layers (neither x nor the weights require a gradient); its own gradient is never computed
    for layer in layers:
        x = layer(x, stack, rate)
    return x
