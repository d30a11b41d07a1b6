"""Local training shared by the algorithms: the client's optimiser on the flat replica, under the run's task.

Plain SGD (and SGD with momentum, optionally Nesterov) is one or two in-place ops on the flat parameter
vector; Adam and AdamW are torch's own optimisers over that one flat tensor (a single fused update per step).
The optimiser's state starts from zero each round, or, when the client keeps it, is copied from
``ctx.optimizer_state`` (the client's entry in the state store) and its new tensors written back there.
Which optimiser steps is :mod:`fedsim.algorithms.client_optimizer`'s choice; the SGD step they all end in is
:mod:`fedsim.algorithms.sgd`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from fedsim.algorithms.base import ClientContext
from fedsim.algorithms.client_optimizer import optimizer_step
from fedsim.config import AlgorithmConfig
from fedsim.data.base import ClientData
from fedsim.models.replica import Replica

GradHook = Callable[[], None]


@dataclass(frozen=True)
class LocalStats:
    """``steps`` optimiser steps taken; ``loss`` the mean training loss over them (a 0-d tensor on the replica's
    device: reading it would make the host wait); ``samples`` seen (with repeats)."""

    steps: int
    loss: Tensor
    samples: int


def num_steps(n_samples: int, opt: AlgorithmConfig) -> int:
    """Steps a client with ``n_samples`` takes: ``local_steps`` if set, else epochs x ceil(n / batch)."""
    if opt.local_steps is not None:
        return opt.local_steps
    return opt.local_epochs * -(-n_samples // opt.batch_size)


def batch_schedule(n_samples: int, opt: AlgorithmConfig, generator: torch.Generator) -> Iterator[tuple[Tensor, int]]:
    """A client's local batches, in order, as ``(permutation, epoch's steps)``: each epoch draws a fresh
    permutation of its ``n_samples`` on the host from the client's own ``generator`` (so batches do not depend
    on where or beside whom the client trains), and step ``s`` of an epoch takes positions ``[s * b, s * b + b)``
    of it, ``b = min(batch_size, n_samples)``, the last batch possibly smaller; the last epoch stops once the
    client has taken its :func:`num_steps`. Both executors draw their batches from this one schedule."""
    total, bs = num_steps(n_samples, opt), min(opt.batch_size, n_samples)
    per_epoch = -(-n_samples // bs)
    taken = 0
    while taken < total:
        steps = min(per_epoch, total - taken)
        yield torch.randperm(n_samples, generator=generator, device="cpu"), steps
        taken += steps


def local_sgd(
    replica: Replica,
    data: ClientData,
    opt: AlgorithmConfig,
    ctx: ClientContext,
    grad_hook: GradHook | None = None,
    lr: float | None = None,
    keep_state: bool = True,
) -> LocalStats:
    """Train ``replica`` in place on ``data`` with the client optimiser ``opt`` names, minimising ``ctx.task``.

    Each epoch draws a fresh permutation from ``ctx.generator``; batches are slices of the permuted data, the
    last one possibly smaller. ``grad_hook`` runs after every backward and may edit ``replica.grad`` in place (a
    proximal term, a control-variate correction). ``lr`` overrides the round's scheduled rate. With
    ``keep_state=False`` the optimiser starts from zero even when the client keeps its state (Ditto's personal
    model trains with an optimiser of its own).
    """
    n = data.n_samples
    total = num_steps(n, opt)
    bs = min(opt.batch_size, n)
    module = replica.module
    if not module.training:  # train() walks every submodule: not once per client when nothing changed
        module.train()
    saved = ctx.optimizer_state if keep_state else None
    step_size = opt.client_lr(ctx.round) if lr is None else lr
    step_fn = optimizer_step(replica, opt.client_optimizer, step_size, saved)
    # plain SGD with nothing editing the gradient steps with autograd's gradients as they come: no zeroing, no
    # accumulating into replica.grad, no second pass over it (the same sums, bit for bit)
    plain = opt.client_optimizer.stateless and not opt.client_optimizer.weight_decay
    direct = grad_hook is None and plain
    device = replica.flat.device
    losses: list[Tensor] = []  # summed once at the end: one op per client, not one per step
    task = ctx.task
    seen = 0
    try:
        for perm, steps in batch_schedule(n, opt, ctx.generator):
            perm = perm.to(device, non_blocking=True)
            epoch = data.take(perm)  # one gather per epoch; each batch is then a slice
            xs, ys = epoch.x.split(bs)[:steps], epoch.y.split(bs)[:steps]  # the batches, as views
            ws = [None] * steps if epoch.weight is None else epoch.weight.split(bs)
            for xb, yb, wb in zip(xs, ys, ws, strict=False):
                if wb is None:
                    loss = task.loss(module(xb), yb)
                else:  # a weighted subset: each sample's loss counts as many samples as it stands for
                    loss = (task.per_sample(module(xb), yb) * wb).sum() / wb.sum()
                grads = replica.gradients(loss)
                if direct:
                    torch._foreach_add_(replica.param_views, grads, alpha=-step_size)
                else:
                    replica.take_gradients(grads)
                    if grad_hook is not None:
                        grad_hook()
                    step_fn()
                losses.append(loss.detach())
            seen += min(steps * bs, n)
    finally:
        close = getattr(step_fn, "close", None)  # Eva's hooks on the replica's layers
        if close is not None:
            close()
    mean = torch.stack(losses).mean() if losses else torch.zeros((), device=device)
    return LocalStats(steps=total, loss=mean, samples=seen)
