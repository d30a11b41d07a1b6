"""What the engine needs from a federated dataset: a client's training split, and a held-out test split."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from fedsim.config import ConfigError


@dataclass(frozen=True)
class ClientData:
    """Features ``x`` (float32, shape ``(n, *input_shape)``) and targets ``y``: int64 class labels ``(n,)`` or
    token ids ``(n, length)``, or float32 regression targets ``(n, ...)``."""

    x: Tensor
    y: Tensor
    weight: Tensor | None = None  # per-sample loss weights (a CRAIG coreset's); None: every sample alike

    @property
    def n_samples(self) -> int:
        return int(self.y.shape[0])

    def take(self, index: Tensor) -> ClientData:
        """The samples at ``index`` (one dimension), their weights with them."""
        weight = None if self.weight is None else rows(self.weight, index)
        return ClientData(rows(self.x, index), rows(self.y, index), weight)


def rows(data: Tensor, index: Tensor) -> Tensor:
    """``data[index]`` for an integer ``index`` of any shape, by ``index_select``: one copy per row, where advanced
    indexing copies element by element (4-5x slower for a batch of 784-feature rows on a CPU)."""
    if index.dim() == 1:  # a client's permutation: no reshaping around the gather
        return data.index_select(0, index)
    return data.index_select(0, index.flatten()).view(*index.shape, *data.shape[1:])


def joined(parts: list[Tensor]) -> Tensor | None:
    """The ``parts`` concatenated along dimension 0 as a view, without a copy, when they lie back to back in
    one storage (consecutive clients of a dataset whose clients are views of one array); None otherwise."""
    first = parts[0]
    storage, end = first.untyped_storage().data_ptr(), first.data_ptr()
    for part in parts:
        same = part.untyped_storage().data_ptr() == storage
        if not (same and part.is_contiguous() and part.shape[1:] == first.shape[1:] and part.data_ptr() == end):
            return None
        end += part.numel() * part.element_size()
    shape = (sum(int(p.shape[0]) for p in parts), *first.shape[1:])
    return first.as_strided(shape, first.stride(), first.storage_offset())


class FederatedDataset(Protocol):
    """A population of clients. ``client(cid)`` must be cheap: no file I/O, ideally a view."""

    num_clients: int
    num_classes: int
    input_shape: tuple[int, ...]
    test: ClientData

    def client(self, cid: int) -> ClientData: ...

    def n_samples(self, cid: int) -> int: ...


class ArrayDataset:
    """Clients as contiguous slices of one materialised array, built once from a partition.

    The training arrays are reordered so that each client's samples are adjacent; ``client(cid)`` then returns
    views, so a round never copies or re-reads data.
    """

    def __init__(
        self,
        x: np.ndarray | Tensor,
        y: np.ndarray | Tensor,
        parts: list[np.ndarray],
        test: ClientData,
        num_classes: int,
    ) -> None:
        order = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]) if parts else np.zeros(0, int)
        xt = torch.as_tensor(np.asarray(x), dtype=torch.float32)
        yt = torch.as_tensor(np.asarray(y))
        yt = yt.float() if yt.is_floating_point() else yt.long()  # regression targets stay floats
        index = torch.from_numpy(order)
        self._x = xt.index_select(0, index).contiguous()
        self._y = yt.index_select(0, index).contiguous()
        sizes = np.array([len(p) for p in parts], dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(sizes)])
        self.num_clients = len(parts)
        self.num_classes = num_classes
        self.input_shape = tuple(self._x.shape[1:])
        self.test = test

    @property
    def nbytes(self) -> int:
        """Bytes of every client's training data."""
        return self._x.numel() * self._x.element_size() + self._y.numel() * self._y.element_size()

    def place_(self, device: torch.device, resident: bool) -> None:
        """Keep the clients' data on ``device`` (``resident``), or in pinned host memory it copies from fast."""
        if resident:
            self._x, self._y = self._x.to(device), self._y.to(device)
        else:
            self._x, self._y = self._x.pin_memory(), self._y.pin_memory()

    def client(self, cid: int) -> ClientData:
        lo, hi = int(self._offsets[cid]), int(self._offsets[cid + 1])
        return ClientData(self._x[lo:hi], self._y[lo:hi])

    def n_samples(self, cid: int) -> int:
        return int(self._offsets[cid + 1] - self._offsets[cid])

    def clients(self, lo: int, hi: int) -> ClientData:
        """Clients ``lo`` to ``hi - 1`` as one: a view, their samples being adjacent."""
        a, b = int(self._offsets[lo]), int(self._offsets[hi])
        return ClientData(self._x[a:b], self._y[a:b])


def check_dataset(data: object, given: str = "data=") -> None:
    """Refuse, in one line naming what is missing or wrong, a dataset that does not follow
    :class:`FederatedDataset`: ``num_clients`` (int >= 1), ``num_classes`` (int), ``input_shape`` (a tuple),
    ``test`` and ``client(cid)`` (each a :class:`ClientData` of tensors ``x`` and ``y`` of as many rows) and
    ``n_samples(cid)`` (an int)."""
    kind = type(data).__name__
    for name, types in (("num_clients", int), ("num_classes", int), ("input_shape", tuple)):
        value = getattr(data, name, None)
        if not isinstance(value, types) or isinstance(value, bool):
            shown = "missing" if value is None else f"a {type(value).__name__}, not an {types.__name__}"
            raise ConfigError(f"{given} {kind}.{name} is {shown} (a FederatedDataset's {name}: {types.__name__})")
    if data.num_clients < 1:  # type: ignore[attr-defined]
        raise ConfigError(f"{given} {kind}.num_clients is {data.num_clients}; a dataset has at least one client")  # type: ignore[attr-defined]
    for name in ("client", "n_samples"):
        if not callable(getattr(data, name, None)):
            raise ConfigError(f"{given} {kind} has no method {name}(cid) (a FederatedDataset's)")
    _check_split(getattr(data, "test", None), f"{given} {kind}.test")
    _check_split(data.client(0), f"{given} {kind}.client(0)")  # type: ignore[attr-defined]
    count = data.n_samples(0)  # type: ignore[attr-defined]
    if not isinstance(count, int | np.integer):
        raise ConfigError(f"{given} {kind}.n_samples(0) returned a {type(count).__name__}, not an int")


def _check_split(split: object, where: str) -> None:
    """``split`` is a ClientData of tensors ``x`` and ``y`` with as many rows, or one ConfigError naming ``where``."""
    if split is None:
        raise ConfigError(f"{where} is missing: a ClientData(x, y) of tensors")
    if not isinstance(split, ClientData):
        hint = " (wrap it: ClientData(torch.as_tensor(x), torch.as_tensor(y)))" if isinstance(split, tuple) else ""
        raise ConfigError(f"{where} is a {type(split).__name__}, not a fedsim.data.ClientData(x, y){hint}")
    for name in ("x", "y"):
        if not isinstance(getattr(split, name), Tensor):
            got = type(getattr(split, name)).__name__
            raise ConfigError(f"{where}.{name} is a {got}, not a torch.Tensor (torch.as_tensor makes one)")
    if split.x.shape[0] != split.y.shape[0]:
        raise ConfigError(f"{where} has {split.x.shape[0]} rows of x and {split.y.shape[0]} of y")
