"""Counting the host's reads of tensors: each makes the host wait for a GPU.

A round may read a constant number of times (its losses, the server's sums, an evaluation), never once per
client; the device-discipline tests and the GPU table's check count them with :class:`HostReads`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

HOST_READS = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__bool__,
    torch.Tensor.cpu,
    torch.Tensor.numpy,
}


class HostReads(TorchFunctionMode):
    """While active, counts each call that reads a tensor on the host (``item``, ``tolist``, ``float()``,
    ``.cpu()``, ...), by name."""

    def __init__(self) -> None:
        super().__init__()
        self.count: Counter[str] = Counter()

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func in HOST_READS:
            self.count[func.__name__] += 1
        return func(*args, **(kwargs or {}))

    @property
    def total(self) -> int:
        return sum(self.count.values())
