"""One batch of split fine-tuning as it travels from an edge device to the cloud, and its validation.

The edge strips padding, so activations leave the device as one ``(tokens, hidden)`` float32 matrix plus each
sentence's length (the attention mask in compact form). A :class:`WireBatch` is that matrix after a codec, with
the labels; :func:`decode_batch` is the cloud's gate: every check runs before anything is decoded or trained,
and a failure is one :class:`BatchError` whose message says what is wrong (gRPC INVALID_ARGUMENT).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fedsim.comm.codecs import Codec, CodecError, Encoded, build_codec, check_payload

MAX_BATCH = 4096  # sentences per message: bounds what a decoder may be asked to allocate


class BatchError(ValueError):
    """A batch the cloud refuses; nothing was trained on it."""


def padded_bytes(lengths: np.ndarray, hidden: int) -> int:
    """Bytes of a batch of ``hidden``-wide fp32 states padded to its longest sentence: the compression baseline."""
    return len(lengths) * int(lengths.max()) * hidden * 4


@dataclass(frozen=True)
class TokenBatch:
    """The bottom's output for real tokens only: ``tokens`` (sum of lengths, hidden) float32, ``lengths`` (batch,)."""

    tokens: np.ndarray
    lengths: np.ndarray

    @property
    def padded_shape(self) -> tuple[int, int, int]:
        """Shape of the batch in fp32 padded only to its longest sentence: the compression baseline."""
        return len(self.lengths), int(self.lengths.max()), int(self.tokens.shape[1])

    @property
    def padded_bytes(self) -> int:
        return padded_bytes(self.lengths, int(self.tokens.shape[1]))


@dataclass(frozen=True)
class WireBatch:
    """What one TrainBatch/Evaluate message carries."""

    codec: str
    dtype: str
    shape: tuple[int, ...]
    payload: bytes
    lengths: np.ndarray  # (batch,) int64, the mask
    labels: np.ndarray  # (batch,) int64

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: the payload plus 4 bytes per sentence each for length and label (an upper bound)."""
        return len(self.payload) + 8 * len(self.lengths)


def pad(tokens: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Inverse of the edge's stripping: ``(batch, longest, hidden)`` zero-padded states and their 0/1 mask."""
    longest = int(lengths.max())
    mask = torch.arange(longest)[None, :] < lengths[:, None]
    hidden = tokens.new_zeros(len(lengths), longest, tokens.shape[1])
    hidden[mask] = tokens
    return hidden, mask.long()


def encode_batch(codec: Codec, batch: TokenBatch, labels: np.ndarray) -> WireBatch:
    """Compress ``batch`` with ``codec`` (a 3-d codec gets the padded tensor) into a message."""
    tokens = torch.from_numpy(batch.tokens)
    lengths = torch.from_numpy(batch.lengths.astype(np.int64))
    x = tokens if codec.ndim == 2 else pad(tokens, lengths)[0]
    enc = codec.encode(x)
    return WireBatch(
        enc.codec, codec.dtype_name, enc.shape, enc.payload, batch.lengths.astype(np.int64), labels.astype(np.int64)
    )


def decode_batch(batch: WireBatch, hidden_size: int, num_labels: int, max_length: int) -> tuple[Tensor, Tensor, Tensor]:
    """Validate ``batch`` and return ``(hidden (B, L, H), mask (B, L), labels (B,))``, or raise :class:`BatchError`."""
    try:
        codec = build_codec(batch.codec)
    except CodecError as exc:
        raise BatchError(str(exc)) from None
    lengths, labels = np.asarray(batch.lengths), np.asarray(batch.labels)
    count = len(lengths)
    if not 1 <= count <= MAX_BATCH:
        raise BatchError(f"batch has {count} sentences; allowed 1..{MAX_BATCH}")
    if len(labels) != count:
        raise BatchError(f"{len(labels)} labels for {count} sentences")
    if lengths.min() < 1 or lengths.max() > max_length:
        raise BatchError(f"sentence lengths must be in 1..{max_length}; got {int(lengths.min())}..{lengths.max()}")
    if labels.min() < 0 or labels.max() >= num_labels:
        raise BatchError(f"labels must be in 0..{num_labels - 1}; got {int(labels.min())}..{int(labels.max())}")
    if batch.dtype != codec.dtype_name:
        raise BatchError(f"codec {codec.spec} sends {codec.dtype_name}, message says dtype {batch.dtype!r}")
    total, longest = int(lengths.sum()), int(lengths.max())
    want = (total, hidden_size) if codec.ndim == 2 else (count, longest, hidden_size)
    if tuple(batch.shape) != want:
        raise BatchError(f"shape {list(batch.shape)} does not match the lengths and hidden size: expected {list(want)}")
    try:
        encoded = Encoded(batch.codec, want, batch.payload)
        check_payload(codec, encoded)
        x = codec.decode(encoded)
    except CodecError as exc:
        raise BatchError(str(exc)) from None
    if not bool(torch.isfinite(x).all()):
        raise BatchError(f"activations contain {int((~torch.isfinite(x)).sum())} non-finite values")
    lengths_t = torch.from_numpy(lengths.astype(np.int64))
    if codec.ndim == 2:
        hidden, mask = pad(x, lengths_t)
    else:
        mask = (torch.arange(longest)[None, :] < lengths_t[:, None]).long()
        hidden = x * mask[..., None]
    return hidden, mask, torch.from_numpy(labels.astype(np.int64))
