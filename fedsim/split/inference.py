"""Classify sentences with what a split run saved: the base model, the adapters and ``head.safetensors``.

The whole model runs in one process, uncompressed: the pretrained encoder with the LoRA adapters on its upper
layers (``peft.PeftModel.from_pretrained``, the standard way to load them), mean pooling over the real tokens,
and the classifier from ``head.safetensors``. A bottleneck split's head holds its trained factors as well and
changes the layer it cuts; this loader takes the plain split and says so for the other.
"""

from __future__ import annotations

from pathlib import Path

import peft
import torch
from safetensors.torch import load_file
from torch import nn
from transformers import AutoTokenizer

from fedsim.config import ConfigError
from fedsim.split.model import load_encoder, mean_pool, minilm_path

HEAD_FILE = "head.safetensors"


class SplitClassifier:
    """``predict(texts)`` with the adapters in ``adapters`` on the model at ``model`` (default MiniLM)."""

    def __init__(self, adapters: str | Path, model: str | Path | None = None, max_length: int = 64) -> None:
        adapters = Path(adapters)
        if not (adapters / HEAD_FILE).is_file():
            raise ConfigError(f"{adapters}: no {HEAD_FILE}; give the adapters directory a split run saved")
        head = load_file(adapters / HEAD_FILE)
        if set(head) != {"weight", "bias"}:
            raise ConfigError(f"{adapters}: a bottleneck split's head; this loader takes the plain split only")
        directory = Path(model) if model is not None else minilm_path()
        encoder = load_encoder(directory)
        self.model = peft.PeftModel.from_pretrained(encoder, adapters).eval()
        self.classifier = nn.Linear(head["weight"].shape[1], head["weight"].shape[0])
        self.classifier.load_state_dict(head)
        self.tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        self.max_length = max_length

    @torch.no_grad()
    def logits(self, texts: list[str]) -> torch.Tensor:
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        batch["token_type_ids"] = torch.zeros_like(batch["input_ids"])  # as the edge's bottom runs it
        hidden = self.model(**batch).last_hidden_state
        return self.classifier(mean_pool(hidden, batch["attention_mask"]))

    def predict(self, texts: list[str]) -> list[int]:
        """The label of each sentence."""
        return [int(k) for k in self.logits(texts).argmax(1)]
