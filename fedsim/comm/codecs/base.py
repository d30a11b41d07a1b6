"""The codec contract: a token matrix in, bytes out, and back; the byte count is what the wire carries.

Activations travel as ``(tokens, hidden)`` float32 matrices (padding already stripped on the edge) or, for
codecs that work on the batch tensor, as ``(batch, tokens, hidden)``. ``encode`` takes any float array (numpy
on an edge device, which has no torch) and computes in numpy; ``decode`` runs on the cloud and returns a torch
tensor, importing torch only then. The shape travels next to the payload, so every codec knows from the shape
alone how many bytes a valid payload has: the cloud checks that before decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from torch import Tensor


class CodecError(ValueError):
    """A codec name, shape or payload that cannot be decoded; the message names what is wrong."""


@dataclass(frozen=True)
class Encoded:
    """What goes on the wire for one batch: codec spec, the original shape, the payload."""

    codec: str
    shape: tuple[int, ...]
    payload: bytes

    @property
    def nbytes(self) -> int:
        return len(self.payload)


class Codec(Protocol):
    """``spec`` is the name the edge sends (``int8``, ``lowrank:8``); it fully determines the decoder."""

    spec: str
    ndim: int  # 2: a (tokens, hidden) matrix; 3: a (batch, tokens, hidden) tensor
    dtype_name: str  # element type of the payload's main array, sent next to it: float32, float16, int8 or int4

    def encode(self, x: ArrayLike) -> Encoded: ...

    def payload_bytes(self, shape: tuple[int, ...]) -> int:
        """Exact payload length of a valid message of ``shape``."""
        ...

    def decode(self, encoded: Encoded) -> Tensor:
        """The float32 tensor of ``encoded.shape``; raises :class:`CodecError` for a payload of the wrong size."""
        ...


def check_payload(codec: Codec, encoded: Encoded) -> None:
    """Raise :class:`CodecError` unless ``encoded`` has the codec's rank, positive dims and exact byte count."""
    if len(encoded.shape) != codec.ndim or any(d <= 0 for d in encoded.shape):
        raise CodecError(f"codec {codec.spec}: shape {list(encoded.shape)} is not {codec.ndim} positive dims")
    want = codec.payload_bytes(encoded.shape)
    if getattr(codec, "variable", False):  # entropy-coded: any length up to the bound
        if not 0 < encoded.nbytes <= want:
            raise CodecError(
                f"codec {codec.spec}: payload is {encoded.nbytes} bytes, shape {list(encoded.shape)} allows 1..{want}"
            )
        return
    if encoded.nbytes != want:
        raise CodecError(
            f"codec {codec.spec}: payload is {encoded.nbytes} bytes, shape {list(encoded.shape)} needs {want}"
        )


def read_arrays(payload: bytes, layout: list[tuple[np.dtype, tuple[int, ...]]]) -> list[np.ndarray]:
    """Split ``payload`` into consecutive little-endian arrays of the given dtypes and shapes."""
    out, offset = [], 0
    for dtype, shape in layout:
        count = int(np.prod(shape))
        out.append(np.frombuffer(payload, dtype=dtype, count=count, offset=offset).reshape(shape))
        offset += count * dtype.itemsize
    return out


def to_matrix(x: ArrayLike) -> np.ndarray:
    """``x`` (a numpy array or a CPU tensor) as a contiguous float32 array."""
    return np.ascontiguousarray(x, dtype=np.float32)


def to_tensor(array: np.ndarray) -> Tensor:
    """The cloud's side of a codec: the decoded array as a float32 torch tensor (torch is imported only here)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))


def relative_error(x: ArrayLike, y: ArrayLike) -> float:
    """||x - y|| / ||x|| (Frobenius), the reconstruction error a codec reports."""
    x64, y64 = np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.float32)
    return float(np.linalg.norm((x64 - y64).ravel()) / max(float(np.linalg.norm(x64.ravel())), 1e-12))
