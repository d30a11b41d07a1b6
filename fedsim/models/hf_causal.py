"""A Hugging Face ``AutoModelForCausalLM`` as a fedsim model: token ids in, next-token logits at every position.

Inputs are ``(batch, length)`` token ids (floats, as every fedsim input is), padded on the right; the output is
``(batch, length, vocab)`` for ``task.kind: language_model`` against targets shifted by one
(:mod:`fedsim.data.text`). Where the model's config names a ``pad_token_id`` the attention mask is where the
ids are not padding; without one no mask is passed, which changes nothing a target reads: padding is on the
right, and a causal model's position t attends to positions up to t only.

The model is a pretrained one read from a local directory (``model.path``, local files only: fedsim never
downloads), or a new one built from a transformers config (``model.config``: ``model_type`` and its settings,
``vocab_size`` defaulting to the data's vocabulary) and initialised under the run's seed.
"""

from __future__ import annotations

import difflib
import inspect
from pathlib import Path
from typing import Any

from pydantic import JsonValue
from torch import Tensor, nn

from fedsim.config import ConfigError
from fedsim.models.adapters import AdapterTarget
from fedsim.models.hf import quietly


class HfCausalLM(nn.Module):
    def __init__(self, model: nn.Module, pad_id: int | None, vocab: int) -> None:
        super().__init__()
        self.model = model
        self.pad_id = pad_id
        self.vocab = vocab
        self.adapter_target = AdapterTarget(part="model", task="CAUSAL_LM")  # no new head: the LM head is pretrained

    def forward(self, x: Tensor) -> Tensor:
        ids = x.long()
        mask = None if self.pad_id is None else (ids != self.pad_id).long()
        logits: Tensor = self.model(input_ids=ids, attention_mask=mask).logits
        # a model may keep more rows than the tokenizer has ids (GPT-2's padded vocabularies): never targets
        return logits[..., : self.vocab] if logits.shape[-1] > self.vocab else logits


def hf_causal_lm(
    input_shape: tuple[int, ...], num_classes: int, path: str | None, config: dict[str, JsonValue] | None
) -> HfCausalLM:
    """``num_classes`` is the data's vocabulary (its tokenizer's ids); the model's must hold it."""
    if len(input_shape) != 1:
        raise ConfigError(f"model.kind=hf_causal_lm needs token ids (batch, length); got {list(input_shape)}")
    from transformers import AutoModelForCausalLM

    if config is not None:
        made = _config(config, num_classes)
        try:
            model = AutoModelForCausalLM.from_config(made)
        except (ValueError, TypeError, KeyError, AssertionError, RuntimeError) as exc:
            raise ConfigError(f"model.config: transformers cannot build it ({_first_line(exc)})") from None
    else:
        if not Path(str(path)).is_dir():  # else transformers reads it as a Hub name and looks for it in its cache
            raise ConfigError(f"model.path: no causal language model at {path} (not a directory)")
        try:
            with quietly():
                model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"model.path: no causal language model at {path} ({_first_line(exc)})") from None
        made = model.config
    vocab = int(made.vocab_size)
    if vocab < num_classes:
        where = "model.config.vocab_size" if config is not None else f"model.path's vocab_size ({path})"
        raise ConfigError(
            f"{where} is {vocab}, smaller than the data's {num_classes} token ids: the tokenizer's ids would index"
            " past the embedding (set data.tokenizer to the model's own)"
        )
    pad = getattr(made, "pad_token_id", None)
    return HfCausalLM(model, None if pad is None else int(pad), num_classes)


def _config(settings: dict[str, JsonValue], num_classes: int) -> Any:
    """The transformers config ``settings`` describe, ``vocab_size`` defaulting to ``num_classes``; a setting the
    config class does not take is refused (transformers would keep it silently, and a misspelt ``n_layers``
    would build the default depth)."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    rest = dict(settings)
    kind = rest.pop("model_type", None)
    if not isinstance(kind, str):
        raise ConfigError("model.config needs model_type (a transformers model type: gpt2, llama, ...)")
    if kind not in CONFIG_MAPPING:
        near = difflib.get_close_matches(kind, list(CONFIG_MAPPING.keys()), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise ConfigError(f"model.config.model_type {kind!r} is not a transformers model type{hint}")
    cls = CONFIG_MAPPING[kind]
    defaults = cls().to_dict()
    known = set(inspect.signature(cls.__init__).parameters) | set(getattr(cls, "attribute_map", {})) | set(defaults)
    for name in rest:
        if name not in known:
            near = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise ConfigError(f"model.config: {kind} has no setting {name!r}{hint}")
    rest.setdefault("vocab_size", num_classes)
    for token in ("bos_token_id", "eos_token_id", "pad_token_id"):  # GPT-2's 50256 past a smaller vocabulary
        default = defaults.get(token)
        if token not in rest and isinstance(default, int) and default >= int(rest["vocab_size"]):  # type: ignore[arg-type]
            rest[token] = None
    try:
        return AutoConfig.for_model(kind, **rest)
    except (ValueError, TypeError, KeyError, AssertionError) as exc:
        raise ConfigError(f"model.config: transformers rejects it ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
