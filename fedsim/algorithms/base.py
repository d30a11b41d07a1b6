"""The one small protocol every FL algorithm implements.

An algorithm says what a client does (its group form, written once over K clients, or a ``client_update`` of
its own: :mod:`fedsim.algorithms.group`), what the clients' results add up to (``sum_sizes``: named segments
of one flat buffer, so a device can pre-sum its clients exactly and devices combine with one all-reduce), and
what the server makes of those sums (``server_update``): its own state's next value and the round's
:class:`MeanUpdate`, which the run's server optimiser (:mod:`fedsim.algorithms.server`) applies to the model.
Every rank runs ``server_update`` on the same global sums, so server state stays in step without being sent
around.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from fedsim.config import AlgorithmConfig
from fedsim.tasks import CLASSIFICATION, Task

ClientState = dict[str, Tensor]

# Every round's sums carry these besides an algorithm's own segments: the sum of the clients' weights (sent
# with each upload), the number of clients (simulation bookkeeping), read by ``server_update``, and how many
# clients' updates DP clipping left alone (fedsim.privacy's adaptive clip reads it).
ROUND_SEGMENTS: dict[str, int] = {"weight": 1, "clients": 1, "unclipped": 1}
UPLOADED_ROUND_SEGMENTS = ("weight",)


@dataclass(frozen=True)
class MeanUpdate:
    """The round's update to the global state, ``total * factor / divisor`` (kept apart so that the plain server
    step adds it with one fused ``alpha``): FedAvg's ``sum(weight * delta) / sum(weight)``, FedNova's rescaled
    normalised sum. Its negative is Reddi et al.'s pseudo-gradient."""

    total: Tensor
    divisor: float
    factor: float = 1.0

    def alpha(self, lr: float) -> float:
        """The scale that turns ``total`` into ``lr`` times the update."""
        return lr * self.factor / self.divisor

    def mean(self) -> Tensor:
        """The update itself, a new tensor."""
        mean = self.total / self.divisor
        return mean if self.factor == 1.0 else mean.mul_(self.factor)


@dataclass(frozen=True)
class RoundContext:
    """What every client of round ``index`` is told alike, built by the engine once a round and never changed.

    ``start`` is the flat model the clients start from (the global one, or the downlink's decoded copy) and
    ``settings`` local training's settings this round: the run's ``algorithm`` section with a controller's knob
    applied (SkewScout's ``local_steps``). Nothing writes into an algorithm's ``cfg``: a knob lives here, and
    a change of settings between rounds (``Simulation.set``) builds the algorithm anew, its server state kept.
    """

    index: int
    start: Tensor
    settings: AlgorithmConfig


@dataclass(frozen=True)
class ClientContext:
    """What a client is told for one round.

    ``global_state`` is the flat global model (read-only), ``weight`` the client's aggregation weight (samples
    or 1), ``generator`` its own RNG, seeded from (seed, round, client) so the result does not depend on which
    device trains it. ``observe(cid, local_model)``, when set, sees the client's flat local model once local
    training ends and before the algorithm turns it into its update (SkewScout's model traveling). ``task`` is
    the loss local training minimises; ``optimizer_state``, when the client keeps its optimiser state between
    rounds, is that state (empty on its first round), updated in place by local training. ``settings`` are the
    round's local-training settings (:class:`RoundContext`); None (Flower's client, a test) means the
    algorithm's own ``cfg``.
    """

    cid: int
    round: int
    global_state: Tensor
    weight: float
    generator: torch.Generator
    observe: Callable[[int, Tensor], None] | None = None
    task: Task = CLASSIFICATION
    optimizer_state: ClientState | None = None
    settings: AlgorithmConfig | None = None

    def local_settings(self, own: AlgorithmConfig) -> AlgorithmConfig:
        """Local training's settings: the round's, or ``own`` (the algorithm's ``cfg``) where none were given."""
        return own if self.settings is None else self.settings

    def local_model_done(self, flat: Tensor) -> None:
        if self.observe is not None:
            self.observe(self.cid, flat)


@dataclass
class ClientResult:
    """What one client adds to the round.

    ``sums`` maps each name of :meth:`Algorithm.sum_sizes` to this client's contribution, already multiplied by
    its weight; the tensors may be views of the replica (the engine adds them before the next client loads).
    ``state`` is the client's new state for stateful algorithms, ``None`` otherwise.
    """

    sums: Mapping[str, Tensor]
    loss: Tensor  # 0-d, on the replica's device: the executor reads every client's loss at once
    samples: int
    steps: int
    state: ClientState | None = None
    metrics: dict[str, Tensor] = field(default_factory=dict)


class Algorithm(Protocol):
    """Client and server halves of one federated algorithm."""

    name: str
    stateful: bool

    def sum_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        """Names and lengths of the summed segments, for a model of ``numel`` state entries."""
        ...

    def broadcast_numel(self, numel: int, n_params: int) -> int:
        """Extra values the server sends each client besides the model (SCAFFOLD's control variate)."""
        ...

    def server_update(self, global_state: Tensor, sums: Mapping[str, Tensor], n_params: int) -> MeanUpdate | None:
        """The server's half: update the algorithm's own server state (SCAFFOLD's control variate) from the global
        sums (which include :data:`ROUND_SEGMENTS`) and return the update the server optimiser applies to
        ``global_state``, or None where the algorithm moves the model itself (LGD's leaders)."""
        ...

    def state_dict(self) -> dict[str, Tensor]:
        """Server-side algorithm state (optimiser moments, control variates) for checkpoints."""
        ...

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None: ...
