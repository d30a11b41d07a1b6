"""Dense codecs: float32 as is (the uncompressed baseline) and float16."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from fedsim.comm.codecs.base import Encoded, check_payload, read_arrays, to_matrix


class DenseCodec:
    """The activations cast to ``dtype`` (``fp32`` or ``fp16``), row-major."""

    ndim = 2

    def __init__(self, dtype: str) -> None:
        self.spec = dtype
        self.dtype = np.dtype("<f4" if dtype == "fp32" else "<f2")
        self.dtype_name = "float32" if dtype == "fp32" else "float16"

    def payload_bytes(self, shape: tuple[int, ...]) -> int:
        return int(np.prod(shape)) * self.dtype.itemsize

    def encode(self, x: Tensor) -> Encoded:
        return Encoded(self.spec, tuple(x.shape), to_matrix(x).astype(self.dtype).tobytes())

    def decode(self, encoded: Encoded) -> Tensor:
        check_payload(self, encoded)
        (array,) = read_arrays(encoded.payload, [(self.dtype, encoded.shape)])
        return torch.from_numpy(array.astype(np.float32))
