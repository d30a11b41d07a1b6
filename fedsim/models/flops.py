"""The floating-point operations of a model's forward pass, counted as it runs, in milliseconds.

torch's own ``FlopCounterMode`` is a dispatch mode, and the first one a process enters imports torch's compiler
stack (``torch._dynamo``, ``torch._inductor``, sympy: about 800 modules, 3 s on a 2-core machine), which every
CPU run paid to choose its threads. This counter is a ``TorchFunctionMode``, which imports nothing: it sees the
calls a model's forward makes at the level of ``torch.nn.functional`` and counts the ones that do the
arithmetic, two FLOPs a multiply-add as torch counts them:

- ``linear``: 2 x the output's elements x the input features;
- ``conv1d/2d/3d``: 2 x the output's elements x the weight's elements per output channel (input channels of the
  group x kernel), and the transposed convolutions by their input's elements;
- ``matmul`` (``@``), ``mm``, ``bmm``, ``addmm``, ``baddbmm``: 2 x the output's elements x the inner dimension;
- ``scaled_dot_product_attention``: the scores and the weighted sum, 2 x batch x heads x L x S x (E + Ev);
- ``multi_head_attention_forward`` (``nn.MultiheadAttention``, which the transformer layers call): the input
  projections, the attention and the output projection.

Elementwise work (activations, normalisation, softmax, pooling) is left out, as torch's counter leaves it out.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode


def _linear(args: tuple[Any, ...], kwargs: dict[str, Any], out: Tensor) -> float:
    weight = args[1] if len(args) > 1 else kwargs["weight"]
    return 2.0 * out.numel() * weight.shape[-1]


def _conv(args: tuple[Any, ...], kwargs: dict[str, Any], out: Tensor) -> float:
    weight = args[1] if len(args) > 1 else kwargs["weight"]
    return 2.0 * out.numel() * (weight.numel() // weight.shape[0])


def _conv_transpose(args: tuple[Any, ...], kwargs: dict[str, Any], out: Tensor) -> float:
    source = args[0] if args else kwargs["input"]
    weight = args[1] if len(args) > 1 else kwargs["weight"]
    return 2.0 * source.numel() * (weight.numel() // weight.shape[0])


def _product(first: int) -> Callable[[tuple[Any, ...], dict[str, Any], Tensor], float]:
    """A matrix product whose left factor is ``args[first]`` (after ``addmm``'s and ``baddbmm``'s addend)."""

    def count(args: tuple[Any, ...], kwargs: dict[str, Any], out: Tensor) -> float:
        left = args[first]
        inner = left.shape[-1] if left.dim() > 0 else 1
        return 2.0 * out.numel() * inner

    return count


def _attention(args: tuple[Any, ...], kwargs: dict[str, Any], out: Tensor) -> float:
    query, key, value = args[:3]
    scores = query.shape[:-1].numel() * key.shape[-2]  # batch x heads x L x S
    return 2.0 * scores * (query.shape[-1] + value.shape[-1])


def _multi_head(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> float:
    query, key = args[0], args[1]  # (L, N, E) and (S, N, E), or unbatched (L, E) and (S, E)
    width = query.shape[-1]
    queries, keys = query.shape[:-1].numel(), key.shape[:-1].numel()
    projections = 2.0 * width * width * (2 * queries + 2 * keys)  # q and the output from L, k and v from S
    return projections + 4.0 * queries * key.shape[0] * width  # scores and the weighted sum, every head


COUNTS: dict[Callable[..., Any], Callable[..., float]] = {
    F.linear: _linear,
    F.conv1d: _conv,
    F.conv2d: _conv,
    F.conv3d: _conv,
    F.conv_transpose1d: _conv_transpose,
    F.conv_transpose2d: _conv_transpose,
    F.conv_transpose3d: _conv_transpose,
    torch.matmul: _product(0),
    Tensor.matmul: _product(0),
    Tensor.__matmul__: _product(0),
    torch.mm: _product(0),
    Tensor.mm: _product(0),
    torch.bmm: _product(0),
    Tensor.bmm: _product(0),
    torch.addmm: _product(1),
    torch.baddbmm: _product(1),
    F.scaled_dot_product_attention: _attention,
    F.multi_head_attention_forward: _multi_head,
}


class FlopCount(TorchFunctionMode):
    """``with FlopCount() as count: model(x)``; then ``count.total``."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0.0

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        count = COUNTS.get(func)
        if count is not None:
            self.total += count(args, kwargs, out)
        return out


def forward_flops(module: nn.Module, sample: Tensor) -> float:
    """FLOPs of ``module``'s forward on ``sample``, without gradients and with no running statistics moved
    (the module is put in eval mode for the count and back after; the transformer layers' fused inference
    path, which would hide their products in one call, is off meanwhile)."""
    training, fast = module.training, torch.backends.mha.get_fastpath_enabled()
    module.eval()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with torch.no_grad(), FlopCount() as count:
            module(sample)
    finally:
        module.train(training)
        torch.backends.mha.set_fastpath_enabled(fast)
    return count.total
