"""The executor seam: "a list of clients in, one local sum and the records out".

An executor owns a rank's one replica and its local sum. The engine hands it the clients this rank trains in a
round, as ``(client, device)`` pairs, where *device* is the logical device a client is charged to (the pool's
unit of scheduling); the torch device everything runs on is the rank's *accelerator*. Executors differ in how
they train: :class:`~fedsim.sim.sequential.SequentialExecutor` one client after another (Parrot), a fused
executor several same-shaped clients at once; the local sum they produce is the same.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from torch import Tensor

from fedsim.models.replica import Replica
from fedsim.sim.state_store import StateStore
from fedsim.sim.sum_buffer import SumBuffer

Observe = Callable[[int, Tensor], None]  # (client, its flat local model) as local training ends
Compress = Callable[[int, float, dict[str, Tensor]], int | None]  # sparsify a client's sums; their wire bytes


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
        round_idx: int,
        assignments: Sequence[tuple[int, int]],
        global_state: Tensor,
        observe: Observe | None = None,
        compress: Compress | None = None,
    ) -> list[ClientRecord]:
        """Train each ``(client, device)`` from ``global_state`` and add it to the local sum; the records come
        back in the order of ``assignments``, their losses and times read from the accelerator once."""
        ...
