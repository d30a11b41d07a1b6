"""Dense codecs: float32 as is (the uncompressed baseline) and float16."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

if TYPE_CHECKING:
    from torch import Tensor

from fedsim.comm.codecs.base import Encoded, check_payload, read_arrays, to_matrix, to_tensor


class DenseCodec:
    """The activations cast to ``dtype`` (``fp32`` or ``fp16``), row-major."""

    ndim = 2

    def __init__(self, dtype: str) -> None:
        self.spec = dtype
        self.dtype = np.dtype("<f4" if dtype == "fp32" else "<f2")
        self.dtype_name = "float32" if dtype == "fp32" else "float16"

    def payload_bytes(self, shape: tuple[int, ...]) -> int:
        return int(np.prod(shape)) * self.dtype.itemsize

    def encode(self, x: ArrayLike) -> Encoded:
        matrix = to_matrix(x)
        return Encoded(self.spec, matrix.shape, matrix.astype(self.dtype).tobytes())

    def decode(self, encoded: Encoded) -> Tensor:
        check_payload(self, encoded)
        (array,) = read_arrays(encoded.payload, [(self.dtype, encoded.shape)])
        return to_tensor(array.astype(np.float32))
