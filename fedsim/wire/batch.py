"""One batch of split fine-tuning as it travels from an edge device to the cloud (numpy only).

The edge strips padding, so activations leave the device as one ``(tokens, hidden)`` float32 matrix plus each
sentence's length (the attention mask in compact form). A :class:`WireBatch` is that matrix after a codec, with
the labels. The cloud's gate, which checks a batch before anything is decoded or trained, is
:func:`fedsim.split.decode.decode_batch`; a failure there is one :class:`BatchError` (gRPC INVALID_ARGUMENT).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedsim.comm.codecs import Codec
from fedsim.comm.ledger import FLOAT32_BYTES

MAX_BATCH = 4096  # sentences per message: bounds what a decoder may be asked to allocate


class BatchError(ValueError):
    """A batch the cloud refuses; nothing was trained on it."""


class BatchTooLarge(BatchError):
    """A batch whose declared size is more work than the cloud takes on (gRPC RESOURCE_EXHAUSTED)."""


def padded_bytes(lengths: np.ndarray, hidden: int) -> int:
    """Bytes of a batch of ``hidden``-wide fp32 states padded to its longest sentence: the compression baseline."""
    return len(lengths) * int(lengths.max()) * hidden * FLOAT32_BYTES


@dataclass(frozen=True)
class TokenBatch:
    """The bottom's output for real tokens only: ``tokens`` (sum of lengths, width) float32, ``lengths`` (batch,).

    ``hidden`` is the model's hidden size, the width of the compression baseline; it is the tokens' width unless
    the bottom ends in a bottleneck (then each token's row holds fewer values than the hidden state)."""

    tokens: np.ndarray
    lengths: np.ndarray
    hidden: int | None = None

    @property
    def padded_shape(self) -> tuple[int, int, int]:
        """Shape of the hidden states in fp32 padded only to the longest sentence: the compression baseline."""
        return len(self.lengths), int(self.lengths.max()), self.hidden or int(self.tokens.shape[1])

    @property
    def padded_bytes(self) -> int:
        return padded_bytes(self.lengths, self.hidden or int(self.tokens.shape[1]))


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


def mask(lengths: np.ndarray, longest: int) -> np.ndarray:
    """``(batch, longest)`` booleans: True on each sentence's real tokens."""
    return np.arange(longest)[None, :] < np.asarray(lengths)[:, None]


def pad_tokens(tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Inverse of the edge's stripping: ``(batch, longest, hidden)`` states, zero past each sentence's end."""
    keep = mask(lengths, int(lengths.max()))
    padded = np.zeros((*keep.shape, tokens.shape[1]), dtype=tokens.dtype)
    padded[keep] = tokens
    return padded


def encode_batch(codec: Codec, batch: TokenBatch, labels: np.ndarray) -> WireBatch:
    """Compress ``batch`` with ``codec`` (a 3-d codec gets the padded tensor) into a message."""
    lengths = batch.lengths.astype(np.int64)
    x = batch.tokens if codec.ndim == 2 else pad_tokens(batch.tokens, lengths)
    enc = codec.encode(x)
    return WireBatch(enc.codec, codec.dtype_name, enc.shape, enc.payload, lengths, labels.astype(np.int64))
