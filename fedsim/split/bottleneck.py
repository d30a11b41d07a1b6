"""The SFT split (Shi et al., 2022): a learned low-rank bottleneck at the split layer's FFN.

Layer k's FFN up-projection ``W`` (d_ff x d, ``intermediate.dense``) is factored once by SVD,
``W ~ U_r S_r V_r^T``. The edge runs the embeddings, layers ``0..k-1`` and layer k's attention, then the frozen
``S_r V_r^T``: r values per token cross the network instead of d. The cloud applies ``U_r`` and the bias
(trained: a learned bottleneck, LoRA-FA-like with the down-projection frozen), GELU, ``output.dense`` and the
LayerNorm, then layers ``k+1..``. The paper "eliminates" the residual around that FFN, so the d-wide attention
output never crosses the network; with ``residual: true`` it does, and then r + d values per token cross.
At full rank with the residual kept, the split model computes exactly the unsplit one.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from transformers import BertModel

from fedsim.split.config import SplitModelConfig
from fedsim.split.model import Bottom, SplitError, Top, extended_mask, mean_pool, split_encoder


def factor(weight: Tensor, rank: int) -> tuple[Tensor, Tensor]:
    """``(U_r, S_r V_r^T)`` of ``weight`` (out x in): the up (out x r) and down (r x in) projections."""
    u, s, vh = torch.linalg.svd(weight.detach().double(), full_matrices=False)
    return u[:, :rank].float().contiguous(), (s[:rank, None] * vh[:rank]).float().contiguous()


def _layers(encoder: BertModel, k: int) -> nn.ModuleList:
    layers = encoder.encoder.layer
    if not 0 <= k < len(layers):
        raise SplitError(f"model.split_layer={k}: a bottleneck split goes inside a layer, 0..{len(layers) - 1}")
    return layers


class BottleneckBottom(nn.Module):
    """The edge half: embeddings, layers ``:k``, layer k's attention, the frozen down-projection."""

    def __init__(self, encoder: BertModel, k: int, down: Tensor, residual: bool) -> None:
        super().__init__()
        layers = _layers(encoder, k)
        self.embeddings = encoder.embeddings
        self.layers = nn.ModuleList(layers[:k])
        self.attention: Any = layers[k].attention  # BertAttention: (output, weights)
        self.down = nn.Linear(down.shape[1], down.shape[0], bias=False)
        self.down.weight.data.copy_(down)
        self.residual = residual
        self.requires_grad_(False)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        hidden = self.embeddings(input_ids=input_ids, token_type_ids=torch.zeros_like(input_ids))
        additive = extended_mask(attention_mask, hidden.dtype)
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=additive)
        attended: Tensor = self.attention(hidden, additive)[0]
        code = self.down(attended)
        return torch.cat([code, attended], dim=-1) if self.residual else code


class BottleneckTop(nn.Module):
    """The cloud half: the trained up-projection (``U_r`` and the bias), GELU, layer k's output, layers ``k+1:``,
    mean pooling over real tokens and a classifier; its input is r (+ d with the residual) values per token."""

    def __init__(self, encoder: BertModel, k: int, num_labels: int, up: Tensor, residual: bool) -> None:
        super().__init__()
        layers = _layers(encoder, k)
        layer: Any = layers[k]  # a BertLayer
        dense = layer.intermediate.dense
        self.rank = up.shape[1]
        self.up = nn.Linear(self.rank, up.shape[0])
        self.up.weight.data.copy_(up)
        self.up.bias.data.copy_(dense.bias.detach())
        self.act: nn.Module = layer.intermediate.intermediate_act_fn
        self.output: Any = layer.output  # BertOutput: LayerNorm(dropout(dense(x)) + skip)
        self.layers = nn.ModuleList(layers[k + 1 :])
        self.first_layer = k + 1
        self.residual = residual
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)

    @property
    def head(self) -> nn.Module:
        """Saved beside the adapters: the classifier, the trained up-projection and layer k's output."""
        return nn.ModuleDict({"classifier": self.classifier, "up": self.up, "output": self.output})

    def encode(self, wire: Tensor, attention_mask: Tensor) -> Tensor:
        code = wire[..., : self.rank]
        skip = (
            wire[..., self.rank :]
            if self.residual
            else torch.zeros_like(self.output.LayerNorm.bias).expand(*wire.shape[:-1], -1)
        )
        hidden = self.output(self.act(self.up(code)), skip)
        additive = extended_mask(attention_mask, hidden.dtype)
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=additive)
        return hidden

    def features(self, wire: Tensor, attention_mask: Tensor) -> Tensor:
        return mean_pool(self.encode(wire, attention_mask), attention_mask)

    def forward(self, wire: Tensor, attention_mask: Tensor) -> Tensor:
        return self.classifier(self.features(wire, attention_mask))


def bottleneck_split(
    encoder: BertModel, k: int, num_labels: int, rank: int, residual: bool
) -> tuple[BottleneckBottom, BottleneckTop]:
    """Edge and cloud halves sharing ``encoder``'s modules; ``rank`` at most min(d_ff, d)."""
    layer: Any = _layers(encoder, k)[k]
    weight: Tensor = layer.intermediate.dense.weight
    if not 1 <= rank <= min(weight.shape):
        raise SplitError(f"model.bottleneck.rank={rank} is outside 1..{min(weight.shape)} for this model")
    up, down = factor(weight, rank)
    return BottleneckBottom(encoder, k, down, residual), BottleneckTop(encoder, k, num_labels, up, residual)


def split_halves(encoder: BertModel, cfg: SplitModelConfig) -> tuple[Bottom | BottleneckBottom, Top | BottleneckTop]:
    """The edge and cloud halves ``cfg`` asks for: at a layer boundary, or at the SFT bottleneck."""
    if cfg.bottleneck is None:
        return split_encoder(encoder, cfg.split_layer, cfg.num_labels)
    return bottleneck_split(encoder, cfg.split_layer, cfg.num_labels, cfg.bottleneck.rank, cfg.bottleneck.residual)


def wire_width(cfg: SplitModelConfig, hidden_size: int) -> int:
    """Values per token the edge sends: the hidden size, or the rank (plus the hidden size with the residual)."""
    if cfg.bottleneck is None:
        return hidden_size
    return cfg.bottleneck.rank + (hidden_size if cfg.bottleneck.residual else 0)
