"""The cloud's gate for a :class:`~fedsim.wire.batch.WireBatch`: validate, decode, pad, as torch tensors.

Every check runs before anything is decoded or trained, and a failure is one :class:`BatchError` whose message
says what is wrong (gRPC INVALID_ARGUMENT).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedsim.comm.codecs import CodecError, Encoded, build_codec, check_payload
from fedsim.wire.batch import MAX_BATCH, BatchError, BatchTooLarge, WireBatch


def token_mask(lengths: Tensor, longest: int) -> Tensor:
    """``(batch, longest)`` booleans: True on each sentence's real tokens."""
    return torch.arange(longest, device=lengths.device)[None, :] < lengths[:, None]


def pad(tokens: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Inverse of the edge's stripping: ``(batch, longest, hidden)`` zero-padded states and their 0/1 mask."""
    longest = int(lengths.max())
    mask = token_mask(lengths, longest)
    hidden = tokens.new_zeros(len(lengths), longest, tokens.shape[1])
    hidden[mask] = tokens
    return hidden, mask.long()


def decode_batch(
    batch: WireBatch,
    hidden_size: int,
    num_labels: int,
    max_length: int,
    max_tokens: int | None = None,
    max_activation: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Validate ``batch`` and return ``(hidden (B, L, H), mask (B, L), labels (B,))``, or raise :class:`BatchError`.

    The work a batch causes is bounded by its declared shape before anything is decoded: more than
    ``max_tokens`` padded tokens (sentences x longest) is :class:`BatchTooLarge`, whatever the payload's size
    (a 3 KB Tucker core may declare 256 sentences of 64 tokens). Activations above ``max_activation`` in
    magnitude are refused like non-finite ones."""
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
        raise BatchError(
            f"labels must be in 0..{num_labels - 1} (model.num_labels={num_labels}); "
            f"got {int(labels.min())}..{int(labels.max())}"
        )
    if batch.dtype != codec.dtype_name:
        raise BatchError(f"codec {codec.spec} sends {codec.dtype_name}, message says dtype {batch.dtype!r}")
    total, longest = int(lengths.sum()), int(lengths.max())
    if max_tokens is not None and count * longest > max_tokens:
        raise BatchTooLarge(
            f"batch declares {count} sentences x {longest} tokens = {count * longest} padded tokens; "
            f"this server takes at most {max_tokens} (server.max_tokens)"
        )
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
    if max_activation is not None and x.numel() and float(x.abs().max()) > max_activation:
        raise BatchError(
            f"activations reach {float(x.abs().max()):.3g} in magnitude; this server takes at most "
            f"{max_activation:g} (server.max_activation)"
        )
    lengths_t = torch.from_numpy(lengths.astype(np.int64))
    if codec.ndim == 2:
        hidden, mask = pad(x, lengths_t)
    else:
        mask = token_mask(lengths_t, longest).long()
        hidden = x * mask[..., None]
    return hidden, mask, torch.from_numpy(labels.astype(np.int64))
