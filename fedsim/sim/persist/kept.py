"""One saved-state container for everything a checkpoint keeps beyond its header (format, round, run id).

Each part of a run is a :class:`Saved` entry: its key in meta.json, an object with :class:`Kept`'s three methods
(JSON ``state_dict()``, ``tensors()`` under names of its own, ``load_state_dict(state, tensors)``) and the
prefix of its tensors' names. :func:`save` and :func:`load` go over a run's entries the same way for every part:
the server's steps with state, the selector, the clock, the model, the algorithm and the server optimiser, the
runtime model, the clients' state owners, the ledger, the totals, gossip's average. The small adapters below
give the parts that predate the convention (tensors by name, JSON alone, a plain value) its three methods.

A part whose ``state_dict()`` is None keeps tensors only and writes no key; it loads from every checkpoint
(``always``), as does any part every checkpoint has held. Any other part a checkpoint has no key for (one
written before the part existed) starts anew.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from torch import Tensor


class Kept(Protocol):
    def state_dict(self) -> Any:
        """JSON (None: the part keeps tensors only)."""
        ...

    def tensors(self) -> Mapping[str, Tensor]: ...

    def load_state_dict(self, state: Any, tensors: Mapping[str, Tensor]) -> None: ...


@dataclass(frozen=True)
class Saved:
    """A part a checkpoint keeps: under ``key`` in meta.json (null: the run has no such part), its tensors'
    names after ``prefix`` (``""``: names of its own, and it is handed every tensor)."""

    key: str
    part: Kept | None
    prefix: str = ""
    always: bool = False  # every checkpoint holds it: loaded whether or not meta.json has its key


def save(entries: Iterable[Saved]) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """The entries' tensors (on the host, copied now: a buffer may change in place) and meta.json's keys."""
    tensors: dict[str, Tensor] = {}
    meta: dict[str, Any] = {}
    for entry in entries:
        part = entry.part
        state = part.state_dict() if part is not None else None
        if state is not None or part is None:
            meta[entry.key] = state
        if part is not None:
            tensors |= {entry.prefix + k: v.to("cpu", copy=True) for k, v in part.tensors().items()}
    return tensors, meta


def load(
    entries: Iterable[Saved], tensors: Mapping[str, Tensor], meta: Mapping[str, Any], skip: Collection[str] = ()
) -> None:
    """Put each entry's part back (but those keyed in ``skip``: an older checkpoint's that a shim reads); a
    part the checkpoint holds nothing for (an older one's) starts anew."""
    for entry in entries:
        if entry.part is None or entry.key in skip or (meta.get(entry.key) is None and not entry.always):
            continue
        own = prefixed(tensors, entry.prefix) if entry.prefix else tensors
        entry.part.load_state_dict(meta.get(entry.key), own)


def prefixed(tensors: Mapping[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


# ------------------------------------------------------------------- the parts that predate the convention


class StateTensors(Protocol):
    """The algorithm's and the server optimiser's state: tensors by name."""

    def state_dict(self) -> Mapping[str, Tensor]: ...

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None: ...


class StateJson(Protocol):
    """The runtime model's and the ledger's state: JSON."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> None: ...


@dataclass(frozen=True)
class TensorsOf:
    """A part whose state is tensors by name (the algorithm's, the server optimiser's)."""

    of: StateTensors

    def state_dict(self) -> None:
        return None

    def tensors(self) -> Mapping[str, Tensor]:
        return self.of.state_dict()

    def load_state_dict(self, state: Any, tensors: Mapping[str, Tensor]) -> None:
        self.of.load_state_dict(tensors)


@dataclass(frozen=True)
class JsonOf:
    """A part whose state is JSON (the runtime model's, the ledger's)."""

    of: StateJson

    def state_dict(self) -> Any:
        return self.of.state_dict()

    def tensors(self) -> Mapping[str, Tensor]:
        return {}

    def load_state_dict(self, state: Any, tensors: Mapping[str, Tensor]) -> None:
        self.of.load_state_dict(state)


@dataclass(frozen=True)
class Value:
    """A plain value read and put back through two functions (the totals, the clients' state owners)."""

    get: Callable[[], Any]
    put: Callable[[Any], None]

    def state_dict(self) -> Any:
        return self.get()

    def tensors(self) -> Mapping[str, Tensor]:
        return {}

    def load_state_dict(self, state: Any, tensors: Mapping[str, Tensor]) -> None:
        self.put(state)


@dataclass(frozen=True)
class Weights:
    """A model's flat weights, kept as the tensor ``name`` and copied back in place."""

    weights: Tensor
    name: str

    def state_dict(self) -> None:
        return None

    def tensors(self) -> Mapping[str, Tensor]:
        return {self.name: self.weights}

    def load_state_dict(self, state: Any, tensors: Mapping[str, Tensor]) -> None:
        self.weights.copy_(tensors[self.name])
