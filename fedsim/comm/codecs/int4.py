"""Symmetric 4-bit quantisation with one float16 scale per row, two values packed per byte.

For low-rank factors, whose error is dominated by the rank cut, 4 bits per entry cost little accuracy and
halve the bytes of int8 factors (the per-row scales go to float16 for the same reason).
"""

from __future__ import annotations

import numpy as np

F16 = np.dtype("<f2")
U8 = np.dtype("u1")
LEVELS = 7  # values in -7..7, stored as 1..15 in a nibble


def quantize_rows_int4(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(packed uint8 of ceil(size / 2), float16 scales)``; ``x ~= q * scales[:, None]`` with q in -7..7."""
    scales = (np.abs(x).max(axis=1) / LEVELS).astype(F16)
    safe = np.where(scales > 0, scales.astype(np.float32), 1.0)
    q = np.clip(np.rint(x / safe[:, None]), -LEVELS, LEVELS).astype(np.int8) + (LEVELS + 1)
    flat = q.astype(U8).ravel()
    if flat.size % 2:
        flat = np.append(flat, U8.type(LEVELS + 1))
    return (flat[0::2] | (flat[1::2] << 4)).astype(U8), scales


def dequantize_rows_int4(packed: np.ndarray, scales: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    nibbles = np.empty(packed.size * 2, dtype=np.int8)
    nibbles[0::2] = packed & 0x0F
    nibbles[1::2] = packed >> 4
    q = (nibbles[: shape[0] * shape[1]] - (LEVELS + 1)).reshape(shape)
    return q.astype(np.float32) * scales.astype(np.float32)[:, None]


def int4_bytes(rows: int, cols: int) -> int:
    return -(-rows * cols // 2) * U8.itemsize + rows * F16.itemsize
