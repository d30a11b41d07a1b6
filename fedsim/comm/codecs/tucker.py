"""Tucker decomposition of the padded (batch, tokens, hidden) tensor with tensorly.

The batch mode is left as it is (tensorly's ``partial_tucker`` over modes 1 and 2); tokens and hidden are
compressed to ``token_rank`` and ``hidden_rank``. The payload is the core (b, rt, rh) and the token (t, rt) and
hidden (h, rh) factors. Unlike the matrix codecs it keeps the padding, which the cloud masks anyway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import tensorly as tl
from numpy.typing import ArrayLike
from tensorly.decomposition import partial_tucker

if TYPE_CHECKING:
    from torch import Tensor

from fedsim.comm.codecs.base import Encoded, check_payload, read_arrays, to_matrix, to_tensor
from fedsim.comm.codecs.int8 import F32


class TuckerCodec:
    ndim = 3
    dtype_name = "float32"

    def __init__(self, token_rank: int, hidden_rank: int, seed: int = 0) -> None:
        self.token_rank = token_rank
        self.hidden_rank = hidden_rank
        self.seed = seed
        self.spec = f"tucker:{token_rank},{hidden_rank}"

    def ranks(self, shape: tuple[int, ...]) -> tuple[int, int]:
        return min(self.token_rank, shape[1]), min(self.hidden_rank, shape[2])

    def payload_bytes(self, shape: tuple[int, ...]) -> int:
        b, t, h = shape
        rt, rh = self.ranks(shape)
        return (b * rt * rh + t * rt + h * rh) * F32.itemsize

    def encode(self, x: ArrayLike) -> Encoded:
        array = to_matrix(x).astype(np.float64)
        shape = (int(array.shape[0]), int(array.shape[1]), int(array.shape[2]))
        rt, rh = self.ranks(shape)
        with tl.backend_context("numpy"):
            (core, factors), _ = partial_tucker(
                array, rank=[rt, rh], modes=[1, 2], n_iter_max=20, random_state=self.seed
            )
        parts = [np.asarray(core, dtype=F32), np.asarray(factors[0], dtype=F32), np.asarray(factors[1], dtype=F32)]
        return Encoded(self.spec, shape, b"".join(np.ascontiguousarray(p).tobytes() for p in parts))

    def decode(self, encoded: Encoded) -> Tensor:
        check_payload(self, encoded)
        b, t, h = encoded.shape
        rt, rh = self.ranks(encoded.shape)
        core, tokens, hidden = read_arrays(encoded.payload, [(F32, (b, rt, rh)), (F32, (t, rt)), (F32, (h, rh))])
        return to_tensor(np.einsum("bxy,tx,hy->bth", core, tokens, hidden).astype(np.float32))
