"""The fused form of an algorithm: what K clients trained together add up to (HFTA-style, FedJAX's batching).

An algorithm that implements :class:`FusedAlgorithm` can be trained by the fused executor, which runs local
SGD for K same-shaped clients at once over their stacked flat models. The algorithm then says three things:
which per-client state it keeps (``fused_state_sizes``), what it adds to the stacked gradient after every
backward (``fused_grad_hook``: a proximal term or a control-variate correction, now a broadcast), and what the
K clients add to the round's sums (``fused_sums``). An algorithm without these methods trains sequentially.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from torch import Tensor

# (params (K, *shape), grad (K, *shape), lo, hi): one parameter's stacked values and gradient (any strides),
# which sit at [lo, hi) of the flat parameter vector; the hook edits ``grad`` in place
FusedHook = Callable[[Tensor, Tensor, int, int], None]


@dataclass(frozen=True)
class FusedGroup:
    """K clients of one fused group, on the accelerator.

    ``local`` (K, numel) their flat models (rows in the group's order), ``global_state`` (numel,) the round's
    model, ``weights`` (K,) their aggregation weights, ``steps`` (K,) the SGD steps each took (float), ``lr``
    the local learning rate, ``states`` their states stacked by name ((K, size), zeros where a client has none).
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
class FusedAlgorithm(Protocol):
    def fused_state_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        """Each client's state by name and length; {} for a stateless algorithm."""
        ...

    def fused_grad_hook(self, group: FusedGroup) -> FusedHook | None:
        """What to add to each parameter's stacked gradient after every backward, or None; the hook is called
        once per parameter with that parameter's slice ``[lo, hi)`` of the flat parameter vector."""
        ...

    def fused_sums(self, group: FusedGroup) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """The group's contribution to each summed segment (already summed over K), and the clients' new
        states stacked by name (empty for a stateless algorithm)."""
        ...


def weighted_delta_sum(group: FusedGroup) -> Tensor:
    """``sum_k weight_k * (local_k - global)``: FedAvg's sum for the group (``local`` is overwritten)."""
    return group.weights @ group.deltas()
