"""Each node's stochastic gradient in a gossip round, one node at a time or K at once.

A node's gradient is taken at its own model on its first batch of the round, drawn by the client's own
(seed, round, node) generator as local SGD draws it. ``executor.kind: sequential`` loads each node's model into
the replica and differentiates it; ``fused`` stacks K nodes' models as one (K, parameters) model and runs it
once over their K batches (torch.func.vmap of functional_call, as the fused executor trains K clients), batches
of unequal size padded and masked. The two give the same gradients up to floating-point summation order; a
model with dropout draws other masks fused (the fused executor's note says why).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from fedsim.algorithms.gossip import GossipConfig
from fedsim.config import ConfigError
from fedsim.data.base import ClientData, FederatedDataset
from fedsim.models.replica import Replica
from fedsim.sim.executors.stacked import member_losses, param_layout, stacked_forward, why_model_not_stacked
from fedsim.sim.rounds.cohort import client_generator
from fedsim.sim.runtime.accelerator import Accelerator
from fedsim.streams import seed_model_randomness
from fedsim.tasks import Task

# (nodes, round, their models) -> each node's (gradient over the parameters, batch loss), in order
Gradients = Callable[[Sequence[int], int, Sequence[Tensor]], list[tuple[Tensor, Tensor]]]


class NodeBatches:
    """Each node's batch of a round: the first of its local-SGD schedule, ``sizes[i]`` samples."""

    def __init__(self, dataset: FederatedDataset, opt: GossipConfig, seed: int, sizes: Sequence[int]) -> None:
        self.dataset, self.opt, self.seed, self.sizes = dataset, opt, seed, sizes

    def take(self, i: int, r: int) -> tuple[ClientData, torch.Generator]:
        """Node i's batch in round ``r`` (on the host or where its data lies) and its generator, advanced past it."""
        data = self.dataset.client(i)
        generator = client_generator(self.seed, r, i)
        perm = torch.randperm(data.n_samples, generator=generator, device="cpu")  # local SGD's first epoch's
        return data.take(perm[: self.sizes[i]]), generator


def sequential_gradients(replica: Replica, task: Task, batches: NodeBatches, accelerator: Accelerator) -> Gradients:
    """One node at a time on the replica; the model's own randomness (dropout) seeded from the node's generator."""
    weight_decay, p = batches.opt.weight_decay, replica.n_params

    def gradients(nodes: Sequence[int], r: int, models: Sequence[Tensor]) -> list[tuple[Tensor, Tensor]]:
        out = []
        for i, x in zip(nodes, models, strict=True):
            batch, generator = batches.take(i, r)
            seed_model_randomness(generator, accelerator.device)
            xb, yb = accelerator.to_device(batch.x), accelerator.to_device(batch.y)
            replica.load_(x)
            if not replica.module.training:  # train() walks every submodule: only after an evaluation
                replica.module.train()
            loss = task.loss(replica.module(xb), yb)
            g = torch.cat([t.reshape(-1) for t in replica.gradients(loss)])  # the flat gradient, one new tensor
            if weight_decay:
                g.add_(x[:p], alpha=weight_decay)
            out.append((g, loss.detach()))
        return out

    return gradients


def fused_gradients(replica: Replica, task: Task, batches: NodeBatches, accelerator: Accelerator) -> Gradients:
    """K nodes at once, their models the rows of one stacked model; refused in one line for a model or task that
    does not stack (BatchNorm statistics, recurrent layers, a task without a per-sample loss)."""
    reason = why_model_not_stacked(replica, task)
    if reason is not None:
        raise ConfigError(f"executor.kind=fused: {reason}")
    module, layout, p = replica.module, param_layout(replica.module), replica.n_params
    weight_decay = batches.opt.weight_decay
    forward = stacked_forward(module)  # an adapted frozen base: run once over the K nodes' rows

    def gradients(nodes: Sequence[int], r: int, models: Sequence[Tensor]) -> list[tuple[Tensor, Tensor]]:
        k = len(nodes)
        data = [batches.take(i, r)[0] for i in nodes]
        longest = max(d.n_samples for d in data)
        xb = torch.stack([_padded(d.x, longest) for d in data]).to(accelerator.device, non_blocking=True)
        yb = torch.stack([_padded(d.y, longest) for d in data]).to(accelerator.device, non_blocking=True)
        mask = torch.stack([_padded(torch.ones(d.n_samples), longest) for d in data]).to(xb.device)
        stacked = torch.stack([x[:p] for x in models])
        params = {
            name: stacked[:, o : o + shape.numel()].reshape(k, *shape).detach().requires_grad_(True)
            for name, o, shape in layout
        }
        if not module.training:
            module.train()
        losses = member_losses(task, forward(params, xb), yb, mask)
        grads = torch.autograd.grad(losses.sum(), list(params.values()))
        flat = torch.cat([g.reshape(k, -1) for g in grads], dim=1)
        if weight_decay:
            flat.add_(stacked, alpha=weight_decay)
        return [(flat[row], losses[row].detach()) for row in range(k)]

    return gradients


def _padded(t: Tensor, n: int) -> Tensor:
    """``t`` with zero rows after it up to ``n`` rows."""
    return torch.cat([t, t.new_zeros((n - len(t), *t.shape[1:]))]) if len(t) < n else t
