"""An algorithm's client update, written once over a leading client dimension K.

An algorithm says three things about its clients: the state each keeps (``client_state_sizes``), what it adds
to the gradient after every backward (``client_grad_hook``: a proximal term, a control-variate correction),
and what each client sends, with its new state (``client_updates``): per summed segment, one row per client
and the coefficient the row is summed with (its weight, or 1). Rows stay per client until the executor has
passed them through the round's update transforms (compressors, and later clipping, noise, attacks), and only
then are they added into the local sum. Local training itself
(the task's loss, the client optimiser, the batches) is the executors': the sequential executor runs these at
K = 1 on the replica (:func:`run_client`), the fused executor at K > 1 on a stacked model (HFTA, FedJAX). So
an algorithm's client update exists once, whichever executor trains it.

An algorithm whose client does more than one local training (Ditto's personal model) writes a
``client_update`` of its own instead (:class:`OwnClientUpdate`) and trains sequentially.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast, runtime_checkable

import torch
from torch import Tensor

from fedsim.algorithms.base import ClientContext, ClientResult, ClientState
from fedsim.algorithms.local_sgd import local_sgd, num_steps
from fedsim.config import AlgorithmConfig
from fedsim.data.base import ClientData
from fedsim.models.replica import Replica
from fedsim.streams import seed_model_randomness

# (params (K, *shape), grad (K, *shape), lo, hi): one parameter's stacked values and gradient (any strides),
# which sit at [lo, hi) of the flat parameter vector; the hook edits ``grad`` in place
GroupHook = Callable[[Tensor, Tensor, int, int], None]


@dataclass(frozen=True)
class ClientGroup:
    """K clients trained together, on the accelerator.

    ``local`` (K, numel) their flat models (rows in the group's order; after local training, their local
    models), ``global_state`` (numel,) the round's model, ``weights`` (K,) their aggregation weights, ``steps``
    (K,) the SGD steps each takes (float), ``lr`` the local learning rate, ``states`` their states stacked by
    name ((K, size), zeros where a client has none yet). ``holds_deltas``: the executor wrote ``local - global``
    into ``local`` straight from the trained parameters (nothing needed the local models themselves), which
    saves a copy and a subtraction pass over K models.
    """

    local: Tensor
    global_state: Tensor
    weights: Tensor
    steps: Tensor
    n_params: int
    lr: float
    states: dict[str, Tensor]
    holds_deltas: bool = False

    def deltas(self) -> Tensor:
        """(K, numel) ``local - global``, in place of ``local`` (the executor reloads it next group)."""
        return self.local if self.holds_deltas else self.local.sub_(self.global_state)


@dataclass(frozen=True)
class ClientUpdates:
    """What K clients send: ``rows[segment]`` (K, size), each client's own; ``coefficients[segment]`` (K,),
    what each row is multiplied by in the sum (its aggregation weight, or 1); ``states`` the clients' new
    states stacked by name ((K, size), empty for a stateless algorithm)."""

    rows: dict[str, Tensor]
    coefficients: dict[str, Tensor]
    states: dict[str, Tensor]

    def sums(self) -> dict[str, Tensor]:
        """Each segment summed over the K clients: ``coefficients @ rows``."""
        return {name: self.coefficients[name] @ rows for name, rows in self.rows.items()}


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

    def client_updates(self, group: ClientGroup) -> ClientUpdates:
        """What each client of the group sends, by segment, and its new state (after local training)."""
        ...


@runtime_checkable
class OwnClientUpdate(Protocol):
    def client_update(
        self, replica: Replica, data: ClientData, state: ClientState | None, ctx: ClientContext
    ) -> ClientResult:
        """Train on ``data`` starting from the replica, which the engine has loaded with the global model."""
        ...


_KINDS: dict[type, tuple[bool, bool]] = {}  # algorithm class -> (writes its own update, has the group form)


def _kind(algorithm: object) -> tuple[bool, bool]:
    """Asked once per class, not per client: a protocol ``isinstance`` walks the protocol's members every time
    (about 30 us, 3% of a W1 client)."""
    kind = type(algorithm)
    if kind not in _KINDS:
        own = callable(getattr(kind, "client_update", None))
        members = ("client_state_sizes", "client_grad_hook", "client_updates")
        _KINDS[kind] = own, not own and all(callable(getattr(kind, name, None)) for name in members)
    return _KINDS[kind]


def writes_own_update(algorithm: object) -> bool:
    """Whether the algorithm writes its own ``client_update`` (:class:`OwnClientUpdate`)."""
    return _kind(algorithm)[0]


def has_group_form(algorithm: object) -> bool:
    """Whether the algorithm states its client update over K clients (:class:`GroupAlgorithm`)."""
    return _kind(algorithm)[1]


def weighted_deltas(group: ClientGroup) -> ClientUpdates:
    """FedAvg's update: each client's ``local - global`` (in place of ``local``), summed with its weight."""
    return ClientUpdates({"delta": group.deltas()}, {"delta": group.weights}, {})


def train_one(
    algorithm: object, replica: Replica, data: ClientData, state: ClientState | None, ctx: ClientContext
) -> tuple[ClientUpdates, ClientResult]:
    """One client on ``replica`` (loaded with the global model): the algorithm's group form at K = 1 around
    local SGD on the replica, or its own ``client_update``, whose sums (each already multiplied by the client's
    weight, as :class:`ClientResult` says) become rows of one divided by that weight, so that transforms see
    every algorithm's update in the same units. Returns the client's updates and its result (loss, samples,
    steps, new state). Torch's global generators are seeded from the client's first
    (:func:`fedsim.streams.seed_model_randomness`), so a model's dropout masks do not depend on where it trains."""
    seed_model_randomness(ctx.generator, replica.flat.device)
    if writes_own_update(algorithm):
        result = cast(OwnClientUpdate, algorithm).client_update(replica, data, state, ctx)
        weight = torch.full((1,), ctx.weight, device=replica.flat.device)
        rows = {name: t.reshape(1, -1) / ctx.weight for name, t in result.sums.items()}
        return ClientUpdates(rows, dict.fromkeys(rows, weight), {}), result
    if not has_group_form(algorithm):
        raise TypeError(f"algorithm {type(algorithm).__name__} has neither a client_update nor a group form")
    form = cast(GroupAlgorithm, algorithm)
    opt, device, n = ctx.local_settings(form.cfg), replica.flat.device, replica.n_params
    sizes = form.client_state_sizes(replica.numel, n)
    states = {
        name: (state[name] if state and name in state else torch.zeros(size, device=device)).view(1, size)
        for name, size in sizes.items()
    }
    steps_weight = torch.tensor([float(num_steps(data.n_samples, opt)), ctx.weight], device=device)
    steps, weights = steps_weight[:1], steps_weight[1:]
    group = ClientGroup(replica.flat.view(1, -1), ctx.global_state, weights, steps, n, opt.client_lr(ctx.round), states)
    hook = form.client_grad_hook(group)
    grad_hook = None if hook is None else lambda: hook(replica.params.view(1, n), replica.grad.view(1, n), 0, n)
    stats = local_sgd(replica, data, opt, ctx, grad_hook=grad_hook)
    ctx.local_model_done(replica.flat)
    updates = form.client_updates(group)
    new = {name: t[0] for name, t in updates.states.items()} or None
    return updates, ClientResult({}, stats.loss, stats.samples, stats.steps, state=new)


def run_client(
    algorithm: object, replica: Replica, data: ClientData, state: ClientState | None, ctx: ClientContext
) -> ClientResult:
    """One client's update with its sums (Flower's client, tests): :func:`train_one`, summed."""
    updates, result = train_one(algorithm, replica, data, state, ctx)
    return ClientResult(updates.sums(), result.loss, result.samples, result.steps, result.state, result.metrics)
