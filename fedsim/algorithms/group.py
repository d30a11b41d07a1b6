"""An algorithm's client update, written once over a leading client dimension K.

An algorithm says three things about its clients: the state each keeps (``client_state_sizes``), what it adds
to the gradient after every backward (``client_grad_hook``: a proximal term, a control-variate correction),
and what its clients add to the round's sums, with their new states (``client_sums``). Local training itself
(the task's loss, the client optimiser, the batches) is the executors': the sequential executor runs these at
K = 1 on the replica (:func:`run_client`), the fused executor at K > 1 on a stacked model (HFTA, FedJAX). So
an algorithm's client update exists once, whichever executor trains it.

An algorithm whose client does more than one local training (Ditto's personal model) writes a
``client_update`` of its own instead (:class:`OwnClientUpdate`) and trains sequentially.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from fedsim.algorithms.base import ClientContext, ClientResult, ClientState
from fedsim.algorithms.local_sgd import local_sgd, num_steps
from fedsim.config import AlgorithmConfig
from fedsim.data.base import ClientData
from fedsim.models.replica import Replica

# (params (K, *shape), grad (K, *shape), lo, hi): one parameter's stacked values and gradient (any strides),
# which sit at [lo, hi) of the flat parameter vector; the hook edits ``grad`` in place
GroupHook = Callable[[Tensor, Tensor, int, int], None]


@dataclass(frozen=True)
class ClientGroup:
    """K clients trained together, on the accelerator.

    ``local`` (K, numel) their flat models (rows in the group's order; after local training, their local
    models), ``global_state`` (numel,) the round's model, ``weights`` (K,) their aggregation weights, ``steps``
    (K,) the SGD steps each takes (float), ``lr`` the local learning rate, ``states`` their states stacked by
    name ((K, size), zeros where a client has none yet).
    """

    local: Tensor
    global_state: Tensor
    weights: Tensor
    steps: Tensor
    n_params: int
    lr: float
    states: dict[str, Tensor]

    def deltas(self) -> Tensor:
        """(K, numel) ``local - global``, in place of ``local`` (the executor reloads it next group)."""
        return self.local.sub_(self.global_state)


@runtime_checkable
class GroupAlgorithm(Protocol):
    @property
    def cfg(self) -> AlgorithmConfig: ...  # local training's settings (the client optimiser, steps, lr)

    def client_state_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        """Each client's state by name and length; {} for a stateless algorithm."""
        ...

    def client_grad_hook(self, group: ClientGroup) -> GroupHook | None:
        """What to add to each parameter's stacked gradient after every backward, or None; the hook is called
        once per parameter with that parameter's slice ``[lo, hi)`` of the flat parameter vector."""
        ...

    def client_sums(self, group: ClientGroup) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """The group's contribution to each summed segment (already summed over K), and the clients' new
        states stacked by name (empty for a stateless algorithm)."""
        ...


@runtime_checkable
class OwnClientUpdate(Protocol):
    def client_update(
        self, replica: Replica, data: ClientData, state: ClientState | None, ctx: ClientContext
    ) -> ClientResult:
        """Train on ``data`` starting from the replica, which the engine has loaded with the global model."""
        ...


def weighted_delta_sum(group: ClientGroup) -> Tensor:
    """``sum_k weight_k * (local_k - global)``: FedAvg's sum for the group (``local`` is overwritten)."""
    return group.weights @ group.deltas()


def run_client(
    algorithm: object, replica: Replica, data: ClientData, state: ClientState | None, ctx: ClientContext
) -> ClientResult:
    """One client's update on ``replica`` (loaded with the global model): the algorithm's own
    ``client_update``, or its group form at K = 1 around local SGD on the replica."""
    if isinstance(algorithm, OwnClientUpdate):
        return algorithm.client_update(replica, data, state, ctx)
    if not isinstance(algorithm, GroupAlgorithm):
        raise TypeError(f"algorithm {type(algorithm).__name__} has neither a client_update nor a group form")
    opt, device, n = algorithm.cfg, replica.flat.device, replica.n_params
    sizes = algorithm.client_state_sizes(replica.numel, n)
    states = {
        name: (state[name] if state and name in state else torch.zeros(size, device=device)).view(1, size)
        for name, size in sizes.items()
    }
    steps = torch.full((1,), float(num_steps(data.n_samples, opt)), device=device)
    weights = torch.full((1,), ctx.weight, device=device)
    group = ClientGroup(replica.flat.view(1, -1), ctx.global_state, weights, steps, n, opt.client_lr(ctx.round), states)
    hook = algorithm.client_grad_hook(group)
    grad_hook = None if hook is None else lambda: hook(replica.params.view(1, n), replica.grad.view(1, n), 0, n)
    stats = local_sgd(replica, data, opt, ctx, grad_hook=grad_hook)
    ctx.local_model_done(replica.flat)
    sums, new_states = algorithm.client_sums(group)
    new = {name: t[0] for name, t in new_states.items()} or None
    return ClientResult(sums, stats.loss, stats.samples, stats.steps, state=new)
