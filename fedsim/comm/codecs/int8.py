"""Symmetric int8 quantisation with one float32 scale per row (per token for activations)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from torch import Tensor

from fedsim.comm.codecs.base import Encoded, check_payload, read_arrays, to_matrix, to_tensor

F32 = np.dtype("<f4")
I8 = np.dtype("i1")


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(int8 values, float32 scales)`` with ``x ~= values * scales[:, None]``; scale = max|row| / 127."""
    scales = (np.abs(x).max(axis=1) / 127.0).astype(F32)
    safe = np.where(scales > 0, scales, 1.0)
    values = np.clip(np.rint(x / safe[:, None]), -127, 127).astype(I8)
    return values, scales


def dequantize_rows(values: np.ndarray, scales: np.ndarray) -> np.ndarray:
    return values.astype(F32) * scales[:, None]


def quantized_bytes(rows: int, cols: int) -> int:
    return rows * cols * I8.itemsize + rows * F32.itemsize


class Int8Codec:
    """Each token's hidden vector as int8 with its own scale: 4x smaller than fp32, error ~0.5% of the norm."""

    spec = "int8"
    dtype_name = "int8"
    ndim = 2

    def payload_bytes(self, shape: tuple[int, ...]) -> int:
        return quantized_bytes(shape[0], shape[1])

    def encode(self, x: ArrayLike) -> Encoded:
        matrix = to_matrix(x)
        values, scales = quantize_rows(matrix)
        return Encoded(self.spec, matrix.shape, values.tobytes() + scales.tobytes())

    def decode(self, encoded: Encoded) -> Tensor:
        check_payload(self, encoded)
        rows, cols = encoded.shape
        values, scales = read_arrays(encoded.payload, [(I8, (rows, cols)), (F32, (rows,))])
        return to_tensor(dequantize_rows(values, scales))
