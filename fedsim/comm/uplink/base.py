"""The uplink compressor contract: K clients' update rows in, what the server sums and what the wire carries out.

A compressor works on a ``(K, d)`` matrix of flat model updates, one row per client (K = 1 sequentially, K > 1
on the fused executor's stacked clients), and on each client's own memory between rounds, a dict of tensors
that lives in the state store under ``uplink.*`` like any client state. It rewrites each row in place into
what the server receives once the message is decoded, fills each client's dict anew (the store's tensors are
never changed in place) and returns the exact bytes of each client's message, which the ledger charges in
place of the dense update. ``Blocks`` tells it where each model tensor lies in the flat row, for the
compressors that work per tensor (per-layer scales, PowerSGD's matrices).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

UplinkState = dict[str, Tensor]
FLOAT32_BYTES = 4


@dataclass(frozen=True)
class Blocks:
    """The shapes of the tensors laid end to end in a flat update, in order."""

    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def whole(cls, numel: int) -> Blocks:
        """One block: a flat vector with no tensor structure."""
        return cls(((numel,),))

    @property
    def numel(self) -> int:
        return sum(_count(shape) for shape in self.shapes)

    def __iter__(self) -> Iterator[tuple[slice, tuple[int, ...]]]:
        """``(slice of the flat row, shape)`` of every tensor with entries."""
        offset = 0
        for shape in self.shapes:
            n = _count(shape)
            if n:
                yield slice(offset, offset + n), shape
            offset += n


def _count(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


class Compressor(Protocol):
    """One uplink compressor, built once per run from ``uplink:``; ``knob`` is the parameter SkewScout may
    turn (top-k's fraction, PowerSGD's rank, QSGD's levels), None where there is none."""

    name: str
    stateful: bool  # keeps memory per client between rounds

    @property
    def knob(self) -> float | None: ...

    def set_knob(self, value: float) -> None: ...

    def compress_(self, rows: Tensor, states: list[UplinkState], seeds: list[int], round_idx: int) -> list[int]:
        """Replace each row of ``rows`` by its decoded message and fill its client's ``states[k]``; ``seeds``
        key each client's random draws (the same on every rank); returns each client's message bytes."""
        ...


def stacked(states: list[UplinkState], name: str, like: Tensor) -> Tensor:
    """The clients' ``name`` tensors as one ``like``-shaped matrix on ``like``'s device; zeros where a client
    has none yet (its first round)."""
    rows = [s[name].to(like.device) if name in s else torch.zeros_like(like[0]) for s in states]
    return torch.stack(rows) if rows else torch.empty_like(like)


def unstacked(states: list[UplinkState], name: str, matrix: Tensor) -> None:
    """Give each client's dict its row of ``matrix`` under ``name`` (the store copies what it keeps)."""
    for state, row in zip(states, matrix, strict=True):
        state[name] = row


def signs(x: Tensor) -> Tensor:
    """+1 or -1 per entry (zero counts as +1: one bit cannot say zero), as DeepSpeed's 1-bit compressors do."""
    return torch.where(x >= 0, 1.0, -1.0).to(x.dtype)


def sign_bytes(blocks: Blocks) -> int:
    """A scaled-sign message: one bit an entry and one float32 scale per tensor."""
    return sum((sl.stop - sl.start + 7) // 8 + FLOAT32_BYTES for sl, _ in blocks)


def client_generator(seed: int, device: torch.device) -> torch.Generator:
    """The generator of one client's compressor draws in a round (stochastic rounding, random factors)."""
    return torch.Generator(device=device).manual_seed(seed)
