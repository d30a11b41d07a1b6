"""Client states on their way from the accelerator to the store, each put as soon as it is on the host.

A client's new state is made where it trained. On the CPU it is put into the store at once. On a GPU it is
copied into pinned host memory on the current stream and a marker (a CUDA event) is recorded after the copy;
the state is put once the device has passed that marker. At most ``slots`` states are on their way at any
time: a new one first puts those whose copies are done and, while ``slots`` remain, waits for the oldest. The
store copies what it is given (:meth:`~fedsim.sim.state.state_store.StateStore.put`), so a pinned buffer is free
again after its put and nothing stored shares memory with the training path.

So the memory a round holds outside the store is at most ``slots`` client states, whatever the cohort; that is
the in-flight bound ``state.in_flight`` states, and ``peak_bytes`` reports what a round actually reached.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from torch import Tensor

from fedsim.sim.runtime.accelerator import Accelerator, Marker
from fedsim.sim.state.state_store import ClientState, StateStore, state_nbytes


@dataclass(frozen=True)
class _InFlight:
    cid: int
    state: ClientState  # host tensors (pinned on a GPU), readable once ``copied`` has been passed
    copied: Marker
    nbytes: int


class StateWriteBack:
    """Puts client states into ``store`` as their copies to the host complete, with at most ``slots`` pending."""

    def __init__(self, store: StateStore, accelerator: Accelerator, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"state write-back needs at least one slot, got {slots}")
        self.store = store
        self.accelerator = accelerator
        self.slots = slots
        self._pending: deque[_InFlight] = deque()
        self.in_flight_bytes = 0  # host bytes of states copied but not yet in the store
        self.peak_bytes = 0  # the most ``in_flight_bytes`` has been since :meth:`reset_peak`
        self.largest_state = 0  # bytes of the largest state seen: the bound is ``slots`` of these

    @property
    def bound_bytes(self) -> int:
        """The most host memory states in flight may take: ``slots`` states of the largest size seen."""
        return self.slots * self.largest_state

    def reset_peak(self) -> None:
        self.peak_bytes = self.in_flight_bytes

    def put(self, cid: int, state: dict[str, Tensor]) -> None:
        """Queue ``cid``'s new ``state`` (tensors on the accelerator or the host; views are fine: they are
        copied before this returns on the CPU, or on the current stream on a GPU) for the store."""
        self._retire_done()
        while len(self._pending) >= self.slots:  # make room first: the new copy is one of the ``slots``
            self._pending[0].copied.synchronize()
            self._retire()
        host = {name: self.accelerator.to_host(t) for name, t in state.items()}
        nbytes = state_nbytes(host)
        self.largest_state = max(self.largest_state, nbytes)
        self._pending.append(_InFlight(cid, host, self.accelerator.record(), nbytes))
        self.in_flight_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.in_flight_bytes)
        self._retire_done()  # on the CPU the copy is done already: put at once

    def drain(self) -> None:
        """Put every state still on its way (the end of a round, before anything reads the store)."""
        while self._pending:
            self._pending[0].copied.synchronize()
            self._retire()

    def _retire_done(self) -> None:
        while self._pending and self._pending[0].copied.query():
            self._retire()

    def _retire(self) -> None:
        done = self._pending.popleft()
        self.store.put(done.cid, done.state)
        self.in_flight_bytes -= done.nbytes
