"""A 2x2 max-pool with torch's values and gradients, fast on a CPU.

On a CPU, torch's ``max_pool2d`` over an NCHW tensor is an order of magnitude slower than over the same values
laid out channels-last (709 against 72 us for 16 x 16 x 28 x 28 on the project's machine), and it was 41% of an
MNIST CNN's training step. Switching the whole network to channels-last gives nothing back (GroupNorm and ReLU
slow down in that layout), so only the pool's forward takes the channels-last kernel: its values and indices
are the same (an index counts ``h * W + w`` within a plane, whatever the memory layout), and the backward is
torch's own ``max_pool2d_with_indices_backward`` on the NCHW input, so the gradient reaches the layer below in
the layout it came in. Ties go where torch's send them. Small maps (under 64k values a torch thread: torch's
kernel shares the planes out among threads), other devices and 3-d inputs take
``max_pool2d`` itself, and so does :func:`torch.vmap` (the fused executor) after folding its dimension into the
batch.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

KERNEL = [2, 2]
# values in the input per torch thread from which the channels-last kernel wins, copies included. torch's NCHW
# kernel shares its planes out among the threads and the channels-last one gains little from them: forward and
# backward on one thread, the channels-last path took 0.40-0.49x of torch's time from 100k values, 1.0x at
# 64k and 1.1-1.6x at 25-50k; on two, 0.65x at 200k and 1.2-1.7x at 25-100k (an AMD EPYC, 2 cores)
CHANNELS_LAST_FROM = 2**16


def _fast(x: Tensor) -> bool:
    return x.device.type == "cpu" and x.dim() == 4 and x.numel() >= CHANNELS_LAST_FROM * torch.get_num_threads()


class _MaxPool2x2(torch.autograd.Function):
    @staticmethod
    def forward(x: Tensor) -> tuple[Tensor, Tensor]:
        values, index = F.max_pool2d(x.contiguous(memory_format=torch.channels_last), 2, return_indices=True)
        return values.contiguous(), index.contiguous()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor], output: tuple[Tensor, Tensor]) -> None:
        ctx.save_for_backward(inputs[0], output[1])
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _index_grad: Tensor | None) -> Tensor:
        x, index = ctx.saved_tensors
        return torch.ops.aten.max_pool2d_with_indices_backward(grad, x, KERNEL, KERNEL, [0, 0], [1, 1], False, index)

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None], x: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Any, Any]]:
        """Under :func:`torch.vmap`: the vmapped dimension folded into the batch, pooled, unfolded."""
        (dim,) = in_dims
        if dim is None:
            return _with_index(x), (None, None)
        folded = x.movedim(dim, 0)
        values, index = _with_index(folded.flatten(0, 1))
        unfold = (*folded.shape[:2], *values.shape[1:])
        return (values.view(unfold), index.view(unfold)), (0, 0)


def _with_index(x: Tensor) -> tuple[Tensor, Tensor]:
    if _fast(x):
        values, index = _MaxPool2x2.apply(x)
        return values, index
    values, index = F.max_pool2d(x, 2, return_indices=True)
    return values, index


def max_pool_2x2(x: Tensor) -> Tensor:
    """``F.max_pool2d(x, 2)``: the same values and gradients, faster on a CPU for large maps."""
    if not _fast(x):
        return F.max_pool2d(x, 2)  # no indices: the cheaper call where nothing needs them
    return _with_index(x)[0]


class MaxPool2x2(nn.Module):
    """``nn.MaxPool2d(2)`` by :func:`max_pool_2x2`."""

    def forward(self, x: Tensor) -> Tensor:
        return max_pool_2x2(x)

    def extra_repr(self) -> str:
        return "kernel_size=2, stride=2"
