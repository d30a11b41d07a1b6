"""The client optimiser's step on the flat replica: plain SGD, SGD with momentum (optionally Nesterov), Eva, or
torch's Adam/AdamW over the one flat parameter tensor.

A step's state starts from zero each round or, when the client keeps it, is copied from the client's entry in
the state store (``saved``) and its new tensors written back there after every step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from fedsim.algorithms.base import ClientState
from fedsim.algorithms.eva import EvaStep
from fedsim.algorithms.sgd import OPTIMIZER_PREFIX, sgd_step_, sgd_update_
from fedsim.config.client_optimizer import (
    AdamClientOptimizer,
    ClientOptimizerConfig,
    EvaClientOptimizer,
    SgdClientOptimizer,
)
from fedsim.models.replica import Replica

Step = Callable[[], None]


def optimizer_step(replica: Replica, opt: ClientOptimizerConfig, step_size: float, saved: ClientState | None) -> Step:
    """One step of the client optimiser ``opt`` on ``replica.params`` from ``replica.grad``; ``saved`` (when the
    client keeps its state) is read now and updated in place after every step."""
    params, grad = replica.params, replica.grad
    if isinstance(opt, SgdClientOptimizer) and opt.stateless:

        def sgd() -> None:
            sgd_update_(params, grad, -step_size, opt.weight_decay)

        return sgd
    if isinstance(opt, SgdClientOptimizer):
        key = OPTIMIZER_PREFIX + "momentum"
        # a copy of the stored buffer: the store's own tensors never change (a checkpoint may be reading them)
        velocity = saved[key].clone() if saved is not None and key in saved else torch.zeros_like(params)
        if saved is not None:
            saved[key] = velocity

        def momentum() -> None:
            sgd_step_(params, grad, velocity, opt, step_size)

        return momentum
    if isinstance(opt, EvaClientOptimizer):
        return EvaStep(replica, opt, step_size, saved)
    return adam_step(params, grad, opt, step_size, saved)


def adam_step(
    params: Tensor, grad: Tensor, opt: AdamClientOptimizer, step_size: float, saved: ClientState | None
) -> Step:
    """torch's Adam/AdamW over the one flat parameter tensor; its state travels through ``saved``."""
    params.grad = grad  # the flat vector is a leaf view: torch.optim reads its .grad as any parameter's
    kind = torch.optim.AdamW if opt.kind == "adamw" else torch.optim.Adam
    optimizer = kind(
        [params], lr=step_size, betas=opt.betas, eps=opt.eps, weight_decay=opt.weight_decay, capturable=params.is_cuda
    )
    names = ("step", "exp_avg", "exp_avg_sq")
    if saved is not None and all(OPTIMIZER_PREFIX + k in saved for k in names):
        optimizer.state[params] = {k: saved[OPTIMIZER_PREFIX + k].clone() for k in names}  # Adam steps in place

    def adam() -> None:
        optimizer.step()
        if saved is not None:
            saved.update({OPTIMIZER_PREFIX + k: v for k, v in optimizer.state[params].items() if k in names})

    return adam
