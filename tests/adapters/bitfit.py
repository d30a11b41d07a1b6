"""A user's own adapter kind, registered as the built-in ones are: BitFit (Ben Zaken, Ravfogel and Goldberg,
ACL 2022, arXiv:2106.10199), which freezes every weight and trains only the biases."""

from __future__ import annotations

from typing import ClassVar, Literal

from torch import nn

from fedsim.config import AdapterConfig, register_adapter
from fedsim.models.adapters import AdapterTarget


class BitFitConfig(AdapterConfig):
    adapts: ClassVar[frozenset[str] | None] = frozenset({"mlp", "logistic"})
    kind: Literal["test_bitfit"] = "test_bitfit"


@register_adapter(BitFitConfig)
def bitfit(cfg: BitFitConfig, module: nn.Module, target: AdapterTarget) -> nn.Module:
    for name, p in module.named_parameters():
        p.requires_grad_(name.endswith("bias"))
    return module
