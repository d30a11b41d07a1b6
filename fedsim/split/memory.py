"""Bytes that autograd keeps for backward, measured with ``torch.autograd.graph.saved_tensors_hooks``.

Parameters are not activations, so tensors sharing storage with a module's parameters are left out; a storage
saved by several ops (the layer input used by Q, K and V) is counted once.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn


class SavedTensorMeter:
    """``with meter.measure(): loss = model(...)`` then ``meter.bytes`` holds what backward will need."""

    def __init__(self, model: nn.Module) -> None:
        self._params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self._params |= {b.untyped_storage().data_ptr() for b in model.buffers()}
        self.bytes = 0
        self.peak = 0

    @contextmanager
    def measure(self) -> Iterator[SavedTensorMeter]:
        seen: dict[int, int] = {}

        def pack(t: Tensor) -> Any:
            storage = t.untyped_storage()
            ptr = storage.data_ptr()
            if ptr not in self._params and ptr != 0:
                seen[ptr] = storage.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield self
        self.bytes = sum(seen.values())
        self.peak = max(self.peak, self.bytes)
