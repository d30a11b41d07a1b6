"""A shared basis (PCA) for activations: the basis is sent once, then only r coefficients per token travel.

An edge calibrates the codec once, before it sends anything, on a calibration pass over its own data
(``fedsim.split.edge_side.calibrate``: the real tokens of its first ``calibration_sentences`` sentences): the
mean token and the top-r principal directions (numpy SVD). A codec never calibrated calibrates on the first
batch it encodes. The first message carries the basis (and mean) beside the coefficients; every later one carries
only its coefficients and the basis's id, so the basis is paid for once and the per-token cost is r numbers
(float32, or int8 with a float32 scale per token for ``basis-int8:R``). Unlike a per-batch factorisation, no
factor of the hidden width travels with each batch.

Payload: basis id (uint64), a flag (uint32: 1 when the basis follows), [mean (d,) and basis (r, d) float32],
the coefficients. The cloud keeps the bases it has been sent (the newest 256, keyed by a hash of their bytes,
which it checks), so a message naming a basis it was never sent is refused, not guessed.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from fedsim.comm.codecs.base import CodecError, Encoded, read_arrays, to_matrix, to_tensor
from fedsim.comm.codecs.int8 import F32, I8, dequantize_rows, quantize_rows, quantized_bytes

if TYPE_CHECKING:
    from torch import Tensor

U64, U32 = np.dtype("<u8"), np.dtype("<u4")
HEADER = U64.itemsize + U32.itemsize
KEEP = 256  # bases the cloud remembers


class _Bases:
    """The bases seen so far, by id, newest last; thread-safe (the gRPC service decodes in worker threads)."""

    def __init__(self) -> None:
        self._items: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key: int, mean: np.ndarray, basis: np.ndarray) -> None:
        with self._lock:
            self._items[key] = (mean, basis)
            self._items.move_to_end(key)
            while len(self._items) > KEEP:
                self._items.popitem(last=False)

    def get(self, key: int) -> tuple[np.ndarray, np.ndarray] | None:
        with self._lock:
            return self._items.get(key)


BASES = _Bases()


def basis_id(mean: np.ndarray, basis: np.ndarray) -> int:
    digest = hashlib.blake2b(mean.tobytes() + basis.tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


class SharedBasisCodec:
    """r coefficients per token against a basis calibrated on the first batch and sent once."""

    ndim = 2

    def __init__(self, rank: int, bits: int = 32) -> None:
        self.rank, self.bits = rank, bits
        self.spec = f"basis:{rank}" if bits == 32 else f"basis-int8:{rank}"
        self.dtype_name = "float32" if bits == 32 else "int8"
        self.variable = True  # the first message also carries the basis
        self._basis: tuple[int, np.ndarray, np.ndarray] | None = None  # the edge's: id, mean, basis
        self._sent = False

    def _coefficient_bytes(self, n: int, r: int) -> int:
        return n * r * F32.itemsize if self.bits == 32 else quantized_bytes(n, r)

    def payload_bytes(self, shape: tuple[int, ...]) -> int:
        """The largest valid payload: the one that carries the basis."""
        n, d = shape
        r = min(self.rank, d)
        return HEADER + (d + r * d) * F32.itemsize + self._coefficient_bytes(n, r)

    def calibrate(self, x: np.ndarray) -> None:
        """Fix the basis from ``x`` (tokens, hidden): its mean and top principal directions."""
        mean = x.mean(axis=0).astype(F32)
        _, _, vh = np.linalg.svd((x - mean).astype(np.float64), full_matrices=False)
        basis = np.ascontiguousarray(vh[: min(self.rank, x.shape[1])], dtype=F32)
        if basis.shape[0] < self.rank:
            basis = np.concatenate([basis, np.zeros((self.rank - basis.shape[0], x.shape[1]), F32)])
        key = basis_id(mean, basis)
        self._basis = (key, mean, basis)
        BASES.put(key, mean, basis)  # this process can decode its own messages (simulation measures error)

    def encode(self, x: ArrayLike) -> Encoded:
        matrix = to_matrix(x)
        if self._basis is None:
            self.calibrate(matrix)
        assert self._basis is not None
        key, mean, basis = self._basis
        coefficients = ((matrix - mean) @ basis.T).astype(F32)
        carries = not self._sent
        self._sent = True
        parts = [np.array([key], U64).tobytes(), np.array([int(carries)], U32).tobytes()]
        if carries:
            parts += [mean.tobytes(), basis.tobytes()]
        if self.bits == 32:
            parts.append(coefficients.tobytes())
        else:
            values, scales = quantize_rows(coefficients)
            parts += [values.tobytes(), scales.tobytes()]
        return Encoded(self.spec, matrix.shape, b"".join(parts))

    def decode(self, encoded: Encoded) -> Tensor:
        n, d = encoded.shape
        r = min(self.rank, d)
        payload = encoded.payload
        coefficient_bytes = self._coefficient_bytes(n, r)
        if len(payload) < HEADER:
            raise CodecError(f"codec {self.spec}: payload of {len(payload)} bytes has no header")
        key_array, flag_array = read_arrays(payload, [(U64, (1,)), (U32, (1,))])
        key, flag = int(key_array[0]), int(flag_array[0])
        offset = HEADER
        if flag == 1:
            need = HEADER + (d + r * d) * F32.itemsize + coefficient_bytes
            if len(payload) != need:
                raise CodecError(f"codec {self.spec}: payload with its basis is {len(payload)} bytes, needs {need}")
            mean, basis = read_arrays(payload[offset:], [(F32, (d,)), (F32, (r, d))])
            if not (np.isfinite(mean).all() and np.isfinite(basis).all()):
                raise CodecError(f"codec {self.spec}: the basis has non-finite values")
            if basis_id(mean, basis) != key:
                raise CodecError(f"codec {self.spec}: the basis does not match its id {key:016x}")
            BASES.put(key, mean.copy(), basis.copy())
            offset += (d + r * d) * F32.itemsize
        elif flag == 0:
            if len(payload) != HEADER + coefficient_bytes:
                raise CodecError(
                    f"codec {self.spec}: payload is {len(payload)} bytes, needs {HEADER + coefficient_bytes}"
                )
            known = BASES.get(key)
            if known is None:
                raise CodecError(f"codec {self.spec}: basis {key:016x} was never sent (its first message is missing)")
            mean, basis = known
            if basis.shape != (r, d):
                raise CodecError(f"codec {self.spec}: basis {key:016x} is {list(basis.shape)}, not {[r, d]}")
        else:
            raise CodecError(f"codec {self.spec}: flag {flag} is neither 0 nor 1")
        if self.bits == 32:
            (coefficients,) = read_arrays(payload[offset:], [(F32, (n, r))])
        else:
            values, scales = read_arrays(payload[offset:], [(I8, (n, r)), (F32, (n,))])
            coefficients = dequantize_rows(values, scales)
        return to_tensor(coefficients @ basis + mean)
