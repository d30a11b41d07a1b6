"""Local training shared by the algorithms: mini-batch SGD on the flat replica."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from fedsim.config import AlgorithmConfig
from fedsim.data.base import ClientData
from fedsim.models.replica import Replica

GradHook = Callable[[], None]


@dataclass(frozen=True)
class LocalStats:
    """``steps`` SGD steps taken; ``loss`` the mean training loss over them (a 0-d tensor on the replica's
    device: reading it would make the host wait); ``samples`` seen (with repeats)."""

    steps: int
    loss: Tensor
    samples: int


def num_steps(n_samples: int, opt: AlgorithmConfig) -> int:
    """SGD steps a client with ``n_samples`` takes: ``local_steps`` if set, else epochs x ceil(n / batch)."""
    if opt.local_steps is not None:
        return opt.local_steps
    return opt.local_epochs * -(-n_samples // opt.batch_size)


def local_sgd(
    replica: Replica,
    data: ClientData,
    opt: AlgorithmConfig,
    generator: torch.Generator,
    grad_hook: GradHook | None = None,
    lr: float | None = None,
) -> LocalStats:
    """Run SGD on ``replica`` in place.

    Each epoch draws a fresh permutation from ``generator``; batches are slices of the permuted data, the last
    one possibly smaller. ``grad_hook`` runs after every backward and may edit ``replica.grad`` in place (a
    proximal term, a control-variate correction). ``lr`` overrides ``opt.lr``. With ``local_momentum`` the
    step is torch.optim.SGD's (dampening 0, optionally Nesterov), its buffer starting at zero every round.
    """
    step_size = opt.lr if lr is None else lr
    n = data.n_samples
    total = num_steps(n, opt)
    bs = min(opt.batch_size, n)
    module = replica.module
    if not module.training:  # train() walks every submodule: not once per client when nothing changed
        module.train()
    device = replica.flat.device
    loss_sum = torch.zeros((), device=device)
    velocity = torch.zeros_like(replica.params) if opt.local_momentum else None
    seen = 0
    step = 0
    while step < total:
        # the client's own host RNG draws the order, so batches do not depend on where the client trains
        perm = torch.randperm(n, generator=generator, device="cpu").to(device, non_blocking=True)
        xs, ys = data.x[perm], data.y[perm]
        for lo in range(0, n, bs):
            if step == total:
                break
            xb, yb = xs[lo : lo + bs], ys[lo : lo + bs]
            replica.zero_grad()
            loss = F.cross_entropy(module(xb), yb)
            loss.backward()
            if grad_hook is not None:
                grad_hook()
            if opt.weight_decay:
                replica.grad.add_(replica.params, alpha=opt.weight_decay)
            if velocity is None:
                replica.params.add_(replica.grad, alpha=-step_size)
            else:
                velocity.mul_(opt.local_momentum).add_(replica.grad)
                direction = replica.grad.add_(velocity, alpha=opt.local_momentum) if opt.nesterov else velocity
                replica.params.add_(direction, alpha=-step_size)
            loss_sum += loss.detach()
            seen += int(yb.shape[0])
            step += 1
    return LocalStats(steps=total, loss=loss_sum / max(total, 1), samples=seen)
