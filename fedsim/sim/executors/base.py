"""The executor seam: "a list of clients in, one local sum and the records out".

An executor owns a rank's one replica and its local sum. The engine hands it the clients this rank trains in a
round, as ``(client, device)`` pairs, where *device* is the logical device a client is charged to (the pool's
unit of scheduling); the torch device everything runs on is the rank's *accelerator*. Executors differ in how
they train: :class:`~fedsim.sim.executors.sequential.SequentialExecutor` one client after another (Parrot), a fused
executor several same-shaped clients at once; the local sum they produce is the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from torch import Tensor

from fedsim.algorithms.base import ClientState, RoundContext
from fedsim.algorithms.sgd import OPTIMIZER_PREFIX
from fedsim.models.replica import Replica
from fedsim.sim.rounds.upload import Compress, SumBuffer
from fedsim.sim.state.state_store import StateStore

Observe = Callable[[int, Tensor], None]  # (client, its flat local model) as local training ends

# A client's entry in the state store holds, beside the algorithm's own tensors, its optimiser's (momentum,
# Adam moments: local training names them ``optimizer.*``), its uplink compressor's (``uplink.*``) and its
# CRAIG coreset (``coreset.*``).
UPLINK_PREFIX = "uplink."
CORESET_PREFIX = "coreset."


@dataclass(frozen=True)
class StoredState:
    """A client's entry in the state store, split by owner: the algorithm's, the optimiser's (``None`` unless
    the client keeps it; then a dict, empty on its first round, that local training fills), the uplink
    compressor's (``None`` unless the round compresses; then a dict the compressor fills) and the coreset's
    (likewise, when clients train on a CRAIG subset)."""

    own: ClientState | None
    optimizer: ClientState | None
    uplink: ClientState | None
    coreset: ClientState | None = None

    @classmethod
    def split(
        cls, state: ClientState | None, keep_optimizer: bool, keep_uplink: bool, keep_coreset: bool = False
    ) -> StoredState:
        if not (state or keep_optimizer or keep_uplink or keep_coreset):
            return _NOTHING_STORED  # a stateless client: nothing to split (every client of W1, say)
        state = state or {}
        mine = (OPTIMIZER_PREFIX, UPLINK_PREFIX, CORESET_PREFIX)
        own = {k: v for k, v in state.items() if not k.startswith(mine)} or None
        optimizer = {k: v for k, v in state.items() if k.startswith(OPTIMIZER_PREFIX)} if keep_optimizer else None
        uplink = _unprefixed(state, UPLINK_PREFIX) if keep_uplink else None
        coreset = _unprefixed(state, CORESET_PREFIX) if keep_coreset else None
        return cls(own, optimizer, uplink, coreset)

    def joined(self, new_own: ClientState | None) -> ClientState:
        """The entry to store after the round: the algorithm's new state beside the optimiser's, the uplink's
        and the coreset's."""
        uplink = {UPLINK_PREFIX + k: v for k, v in (self.uplink or {}).items()}
        coreset = {CORESET_PREFIX + k: v for k, v in (self.coreset or {}).items()}
        return {**(new_own or {}), **(self.optimizer or {}), **uplink, **coreset}


def _unprefixed(state: ClientState, prefix: str) -> ClientState:
    return {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}


@dataclass(frozen=True)
class ClientRecord:
    """One client's turn on a device: unix ``start``/``end`` seconds, of which ``wait_s`` went to waiting for
    its data and state; ``size`` its training samples, ``samples`` seen (with repeats over epochs), mean train
    ``loss``; ``delta_bytes`` the wire bytes of a compressed update (None: sent dense)."""

    cid: int
    device: int
    start: float
    end: float
    size: int
    samples: int
    loss: float
    delta_bytes: int | None = None
    wait_s: float = 0.0

    @property
    def seconds(self) -> float:
        return self.end - self.start


_NOTHING_STORED = StoredState(None, None, None)


class Executor(Protocol):
    """Trains a rank's clients of a round into its local sum."""

    replica: Replica
    local_sum: SumBuffer
    store: StateStore  # the rank's client states (host memory or disk), read and written by the executor

    def begin_round(self) -> None:
        """Zero the local sum; every client this rank trains in the round is then added to it."""
        ...

    def train(
        self,
        round: RoundContext,
        assignments: Sequence[tuple[int, int]],
        observe: Observe | None = None,
        compress: Compress | None = None,
    ) -> list[ClientRecord]:
        """Train each ``(client, device)`` from ``round.start`` with ``round.settings`` and add it to the local
        sum; the records come back in the order of ``assignments``, their losses and times read from the
        accelerator once."""
        ...
