"""Low-rank compression of a batch's token matrix (Shi et al., 2022): X (tokens x hidden) ~= (U S) V^T.

The factors come from tensorly's randomised SVD of the matrix the edge is about to send, padding already
stripped. With ``bits`` 8 the factors are quantised to int8 row by row (float32 scales); with ``bits`` 4, two
values per byte with a float16 scale per singular direction. For ``n`` tokens, hidden size ``h`` and rank ``r``
the payload is ``(n + h) r`` numbers instead of ``n h``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import tensorly as tl
from numpy.typing import ArrayLike
from tensorly.tenalg import svd_interface

if TYPE_CHECKING:
    from torch import Tensor

from fedsim.comm.codecs.base import Encoded, check_payload, read_arrays, to_matrix, to_tensor
from fedsim.comm.codecs.int4 import F16, U8, dequantize_rows_int4, int4_bytes, quantize_rows_int4
from fedsim.comm.codecs.int8 import F32, I8, dequantize_rows, quantize_rows, quantized_bytes

NAMES = {32: ("lowrank", "float32"), 8: ("lowrank-int8", "int8"), 4: ("lowrank-int4", "int4")}


class LowRankCodec:
    """Rank-``rank`` factors by randomised SVD, as float32 (``bits=32``), per-row int8 or per-row int4."""

    ndim = 2

    def __init__(self, rank: int, bits: int = 32, seed: int = 0) -> None:
        if bits not in NAMES:
            raise ValueError(f"factor bits must be one of {sorted(NAMES)}, got {bits}")
        self.rank = rank
        self.bits = bits
        self.seed = seed
        name, self.dtype_name = NAMES[bits]
        self.spec = f"{name}:{rank}"

    def effective_rank(self, shape: tuple[int, ...]) -> int:
        return min(self.rank, shape[0], shape[1])

    def payload_bytes(self, shape: tuple[int, ...]) -> int:
        n, h = shape
        r = self.effective_rank(shape)
        if self.bits == 8:
            return quantized_bytes(n, r) + quantized_bytes(r, h)
        if self.bits == 4:
            return int4_bytes(r, n) + int4_bytes(r, h)
        return (n * r + r * h) * F32.itemsize

    def encode(self, x: ArrayLike) -> Encoded:
        matrix = to_matrix(x).astype(np.float64)  # float64 SVD: the factors are then cast once
        shape = (int(matrix.shape[0]), int(matrix.shape[1]))
        r = self.effective_rank(shape)
        with tl.backend_context("numpy"):
            u, s, v = svd_interface(matrix, method="randomized_svd", n_eigenvecs=r, random_state=self.seed)
        left = (u[:, :r] * s[:r]).astype(F32)
        right = np.ascontiguousarray(v[:r]).astype(F32)
        if self.bits == 32:
            return Encoded(self.spec, shape, left.tobytes() + right.tobytes())
        if self.bits == 4:  # both factors scaled per singular direction: a row of U mixes very unequal columns
            parts = [*quantize_rows_int4(np.ascontiguousarray(left.T)), *quantize_rows_int4(right)]
            return Encoded(self.spec, shape, b"".join(p.tobytes() for p in parts))
        lq, ls = quantize_rows(left)
        rq, rs = quantize_rows(right)
        return Encoded(self.spec, shape, lq.tobytes() + ls.tobytes() + rq.tobytes() + rs.tobytes())

    def decode(self, encoded: Encoded) -> Tensor:
        check_payload(self, encoded)
        n, h = encoded.shape
        r = self.effective_rank(encoded.shape)
        if self.bits == 4:
            layout: list[tuple[np.dtype, tuple[int, ...]]] = [
                (U8, (-(-n * r // 2),)),
                (F16, (r,)),
                (U8, (-(-r * h // 2),)),
                (F16, (r,)),
            ]
            lq, ls, rq, rs = read_arrays(encoded.payload, layout)
            left, right = dequantize_rows_int4(lq, ls, (r, n)).T, dequantize_rows_int4(rq, rs, (r, h))
        elif self.bits == 8:
            lq, ls, rq, rs = read_arrays(encoded.payload, [(I8, (n, r)), (F32, (n,)), (I8, (r, h)), (F32, (r,))])
            left, right = dequantize_rows(lq, ls), dequantize_rows(rq, rs)
        else:
            left, right = read_arrays(encoded.payload, [(F32, (n, r)), (F32, (r, h))])
        return to_tensor(left @ right)
