"""Eva (Zhang, Shi and Li, ICLR 2023): second-order SGD from Kronecker *vectors*, with no matrix inverted.

For each linear or convolutional layer, Eva keeps running averages (weight ``decay`` on the old value) of
two small vectors, the batch mean of the layer's inputs ``a`` (a 1 appended for the bias; a convolution's
input patches averaged over positions) and the batch mean of the gradient of the loss with respect to its
outputs ``g``. It preconditions the layer's gradient ``G`` (out x in, the bias a last column) with the damped
rank-one Kronecker curvature ``(a a^T (x) g g^T + damping I)^{-1}``, which Sherman-Morrison makes explicit:

    P = (G - (g^T G a) / (|a|^2 |g|^2 + damping) g a^T) / damping

scales every preconditioned gradient by ``nu = min(1, sqrt(kl_clip / sum_l lr^2 <P_l, G_l>))`` (KL clipping, as
K-FAC does; ``kl_clip: 0`` skips it), leaves other parameters' gradients (normalisation layers) as they are,
and takes torch.optim.SGD's step with ``momentum`` and ``weight_decay``. Its state (the vectors, the
momentum buffer, the steps taken) starts afresh each round or stays with the client (``state:
client``), as Adam's does.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedsim.algorithms.base import ClientState
from fedsim.algorithms.sgd import OPTIMIZER_PREFIX, sgd_step_
from fedsim.config.client_optimizer import EvaClientOptimizer
from fedsim.models.replica import Replica

STATE = ("momentum", "eva_a", "eva_g", "eva_steps")  # the client's entries under OPTIMIZER_PREFIX


def preconditioned(grad: Tensor, a: Tensor, g: Tensor, damping: float) -> Tensor:
    """Eva's preconditioned gradient of one layer: ``grad`` (out x in) against its Kronecker vectors."""
    coefficient = (g @ grad @ a) / (a.dot(a) * g.dot(g) + damping)
    return (grad - coefficient * torch.outer(g, a)) / damping


Layer = nn.Linear | nn.Conv2d


def eva_layers(module: nn.Module) -> list[Layer]:
    """Linear layers and ungrouped, numerically padded 2-d convolutions with a trainable weight: those Eva
    preconditions (other parameters step with their plain gradients)."""
    layers: list[Layer] = []
    for m in module.modules():
        if isinstance(m, nn.Conv2d) and (m.groups != 1 or isinstance(m.padding, str)):
            continue
        if isinstance(m, nn.Linear | nn.Conv2d) and m.weight.requires_grad:
            layers.append(m)
    return layers


class EvaStep:
    """One Eva step of ``replica`` per call, from the gradients in ``replica.grad``; :meth:`close` removes the
    hooks that record each layer's vectors in the forward and backward passes."""

    def __init__(self, replica: Replica, opt: EvaClientOptimizer, step_size: float, saved: ClientState | None) -> None:
        self.replica, self.opt, self.lr, self.saved = replica, opt, step_size, saved
        self.layers = eva_layers(replica.module)
        sizes_a = [m.weight[0].numel() + (m.bias is not None) for m in self.layers]
        sizes_g = [int(m.weight.shape[0]) for m in self.layers]
        device = replica.params.device
        stored = saved is not None and all(OPTIMIZER_PREFIX + k in saved for k in STATE)
        fresh = {
            "momentum": torch.zeros_like(replica.params),
            "eva_a": torch.zeros(sum(sizes_a), device=device),
            "eva_g": torch.zeros(sum(sizes_g), device=device),
            "eva_steps": torch.zeros(1, device=device),
        }
        # copies: the store's own tensors never change (a checkpoint may be reading them)
        self.state = {k: saved[OPTIMIZER_PREFIX + k].clone() for k in STATE} if stored and saved is not None else fresh
        self.a = list(self.state["eva_a"].split(sizes_a))  # views: the running vectors, layer by layer
        self.g = list(self.state["eva_g"].split(sizes_g))
        self.batch_a: list[Tensor | None] = [None] * len(self.layers)
        self.batch_g: list[Tensor | None] = [None] * len(self.layers)
        self.handles = [m.register_forward_hook(self._recorder(i)) for i, m in enumerate(self.layers)]

    def _recorder(self, i: int) -> Any:
        def record(module: Layer, inputs: tuple[Tensor, ...], output: Tensor) -> None:
            if not torch.is_grad_enabled():
                return
            with torch.no_grad():
                self.batch_a[i] = _input_vector(module, inputs[0].detach())

            def gradient(grad: Tensor) -> None:
                self.batch_g[i] = grad.mean(0) if grad.dim() == 2 else grad.mean((0, 2, 3))

            output.register_hook(gradient)

        return record

    def __call__(self) -> None:
        opt, params, grad = self.opt, self.replica.params, self.replica.grad
        # the first step takes its vectors as they are; on the device, no read back
        decay = torch.where(self.state["eva_steps"] > 0, opt.decay, 0.0)
        total = torch.zeros((), device=params.device)
        grads = []
        for i, layer in enumerate(self.layers):
            batch_a, batch_g = self.batch_a[i], self.batch_g[i]
            if batch_a is None or batch_g is None:  # the layer took no part in this step's loss
                continue
            self.a[i].mul_(decay).add_(batch_a * (1 - decay))
            self.g[i].mul_(decay).add_(batch_g * (1 - decay))
            g_weight = layer.weight.grad
            assert g_weight is not None
            matrix = g_weight.reshape(int(g_weight.shape[0]), -1)
            if layer.bias is not None and layer.bias.grad is not None:
                matrix = torch.cat([matrix, layer.bias.grad[:, None]], 1)
            p = preconditioned(matrix, self.a[i], self.g[i], opt.damping)
            total += (p * matrix).sum() * self.lr**2
            grads.append((layer, p))
        self.state["eva_steps"] += 1
        one = torch.ones((), device=params.device)
        nu = (opt.kl_clip / total).sqrt().clamp(max=1.0) if opt.kl_clip else one
        nu = torch.where(total > 0, nu, one)
        for layer, p in grads:  # the preconditioned gradients replace the raw ones, in the flat grad
            width = layer.weight[0].numel()
            assert layer.weight.grad is not None
            layer.weight.grad.copy_(p[:, :width].reshape(layer.weight.shape) * nu)
            if layer.bias is not None and layer.bias.grad is not None:
                layer.bias.grad.copy_(p[:, width] * nu)
        sgd_step_(params, grad, self.state["momentum"], opt, self.lr)
        self.batch_a = [None] * len(self.layers)
        self.batch_g = [None] * len(self.layers)
        if self.saved is not None:
            self.saved.update({OPTIMIZER_PREFIX + k: v for k, v in self.state.items()})

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()


def _input_vector(module: Layer, x: Tensor) -> Tensor:
    """The batch mean of a layer's input: a linear layer's features (over every leading dimension), a
    convolution's patches (over the batch first, then every position); with a 1 for the bias."""
    if isinstance(module, nn.Conv2d):
        padding = module.padding
        assert not isinstance(padding, str)  # eva_layers leaves out "same" and "valid"
        patches = F.unfold(x.mean(0, keepdim=True), module.kernel_size, module.dilation, padding, module.stride)
        # (1, in_c * kh * kw, positions)
        a = patches.mean((0, 2))
    else:
        a = x.reshape(-1, x.shape[-1]).mean(0)
    return torch.cat([a, a.new_ones(1)]) if module.bias is not None else a
