"""The SGD step every client optimiser ends in, defined once for the sequential and the fused executor and Eva
alike, and the prefix under which a client's optimiser state lives in the state store."""

from __future__ import annotations

from torch import Tensor

from fedsim.config.client_optimizer import EvaClientOptimizer, SgdClientOptimizer

OPTIMIZER_PREFIX = "optimizer."


def sgd_update_(params: Tensor, grad: Tensor, rate: float | Tensor, weight_decay: float) -> None:
    """Plain SGD in place: ``params += rate * (grad + weight_decay * params)``, ``rate`` being minus the step
    size, or (K, 1, ...) rates of K stacked clients (0 for a client whose steps are done); ``grad`` is
    overwritten. One definition for the sequential and the fused executor."""
    if weight_decay:
        grad.add_(params, alpha=weight_decay)
    if isinstance(rate, Tensor):
        params.addcmul_(grad, rate)
    else:
        params.add_(grad, alpha=rate)


def sgd_step_(
    params: Tensor, grad: Tensor, velocity: Tensor, opt: SgdClientOptimizer | EvaClientOptimizer, step_size: float
) -> None:
    """torch.optim.SGD's step with ``opt``'s weight decay, ``momentum`` (the ``velocity`` buffer, updated in
    place; unused without momentum) and Nesterov (SGD's): ``d = grad + wd p``; ``v = mu v + d``; ``p -= lr (d +
    mu v)`` with Nesterov, else ``p -= lr v`` (``p -= lr d`` without momentum). ``grad`` is overwritten."""
    if opt.weight_decay:
        grad.add_(params, alpha=opt.weight_decay)
    direction = grad
    if opt.momentum:
        direction = velocity.mul_(opt.momentum).add_(grad)
        if isinstance(opt, SgdClientOptimizer) and opt.nesterov:
            direction = grad.add_(velocity, alpha=opt.momentum)
    params.add_(direction, alpha=-step_size)
