"""How far plain LoRA's federated averaging is from averaging the clients' updates (``lora_factor_error``).

A LoRA layer's update is ``(alpha / r) B A``. FedAvg averages the factors apart, so the server's layer moves by
``mean_k(B_k) mean_k(A_k)`` where the clients' updates average to ``mean_k(B_k A_k)`` (weights ``w_k``, the
rule's); the two differ unless every client's A is the same (Sun et al., ICLR 2024, FFA-LoRA, Section 3, and
Wang et al. 2024, FLoRA, Section 3, measure this error; LoRA-FA, A frozen at its init, makes it 0). This stage
reads the round's rows before the rule and reports, over the model's LoRA layers (a trained ``lora_B`` and its
``lora_A`` by peft's names), the relative Frobenius error ``||mean(B_k A_k) - mean(B_k) mean(A_k)|| /
||mean(B_k A_k)||`` of the layers' new weights' adapter part: the largest (``max``) and the mean (``mean``). A
layer whose A is frozen (LoRA-FA) counts as 0, exactly so. It changes nothing; as any stage reading rows it is
refused beside SecAgg+ and central DP.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from torch import Tensor

from fedsim.config import ConfigError, register_server_stage
from fedsim.config.server_stage import Point, RowsStageConfig
from fedsim.sim.server_stages.base import ServerView, StageContext, Stateless
from fedsim.sim.server_stages.lora_layers import Layer, lora_layers


class LoraFactorErrorConfig(RowsStageConfig):
    """Report plain LoRA's factor-averaging error each round (metrics ``lora_factor_error.max`` and ``.mean``)."""

    kind: Literal["lora_factor_error"] = "lora_factor_error"
    at: Point = "before_rule"
    reads_records: ClassVar[bool] = False


def factor_errors(model: Tensor, rows: Tensor, weights: Tensor, layers: dict[str, Layer]) -> dict[str, float]:
    """Each layer's relative error for clients whose new flat vectors are ``model + rows[k]``, weighted by
    ``weights`` (normalised here); a layer with a frozen A: 0."""
    w = (weights / weights.sum()).double()
    errors = {}
    for layer, (b, b_shape, a, a_shape) in layers.items():
        if a is None:
            errors[layer] = 0.0
            continue
        bs = (model[b] + rows[:, b]).double().view(-1, *b_shape)
        As = (model[a] + rows[:, a]).double().view(-1, *a_shape)
        mean_of_products = torch.einsum("k,kij,kjl->il", w, bs, As)
        product_of_means = torch.einsum("k,kij->ij", w, bs) @ torch.einsum("k,kjl->jl", w, As)
        scale = float(mean_of_products.norm())
        errors[layer] = float((mean_of_products - product_of_means).norm()) / scale if scale > 0 else 0.0
    return errors


@register_server_stage(LoraFactorErrorConfig)
class LoraFactorError(Stateless):
    def __init__(self, cfg: LoraFactorErrorConfig, context: StageContext) -> None:
        self.layers = lora_layers(context.parameters)
        if not self.layers:
            raise ConfigError(
                "the model has no trained lora_B; it measures a LoRA adapter (model.adapter.kind=lora or lora_fa)"
            )
        self.errors: dict[str, float] = {}

    def apply_(self, view: ServerView) -> bool:
        rows = view.rows
        assert rows is not None  # a RowsStageConfig is handed them
        kept = rows.weights > 0
        if bool(kept.any()):
            self.errors = factor_errors(view.model, rows.rows[kept.cpu()], rows.weights[kept], self.layers)
        return False

    def round_metrics(self) -> dict[str, float]:
        if not self.errors:
            return {}
        values = list(self.errors.values())
        return {"max": max(values), "mean": sum(values) / len(values)}
