"""Adapters on a model (``model.adapter``): the built-in ``lora`` and ``lora_fa`` through peft, and :func:`adapt`,
which every model kind calls to put its configured adapter on.

A model module says where its adapter goes with an ``adapter_target`` attribute (an :class:`AdapterTarget`;
without one, on the whole module): the Hugging Face wrappers point at the ``transformers`` model inside them,
so peft's saved adapter loads onto ``AutoModelFor...from_pretrained(base)`` directly. What the builder leaves
``requires_grad`` is all that a replica lays flat (fedsim/models/replica.py): the adapter and the new head are
a client's state, upload, clip and noise; the frozen base stays in the module, built from the run's seed on
every replica, never sent nor saved. peft is imported only when an adapter is built.
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from fedsim.config import ConfigError
from fedsim.config.adapter import ADAPTERS, AdapterConfig, LoraAdapter, LoraFaAdapter, register_adapter
from fedsim.models.replica import load_flat

__all__ = ["AdapterTarget", "adapt", "save_adapter"]

ADAPTER_DIR = "adapter"  # OUT/adapter: peft's adapter_config.json and adapter_model.safetensors


@dataclass(frozen=True)
class AdapterTarget:
    """Where on a model its adapter goes: ``part``, the dotted name of the submodule the adapter wraps ("" the
    whole module); ``task``, that part's peft ``TaskType`` (``SEQ_CLS``, ``CAUSAL_LM``; written into
    adapter_config.json), None for a plain module; ``head``, the part's submodules trained whole beside the
    adapter (a classification head new to the pretrained model)."""

    part: str = ""
    task: str | None = None
    head: tuple[str, ...] = ()


def adapt(module: nn.Module, cfg: AdapterConfig) -> nn.Module:
    """``module`` with ``cfg``'s adapter on it (the module itself without one), by the kind's registered builder,
    called with the settings, the module and its :class:`AdapterTarget`; call it under the seed the module was
    built with, so that every replica and a resumed run draw the same frozen factors."""
    target = getattr(module, "adapter_target", AdapterTarget())
    adapted = ADAPTERS.build(cfg, module, target)
    if not isinstance(adapted, nn.Module):
        raise ConfigError(f"model.adapter.kind={cfg.kind} returned a {type(adapted).__name__}, not a torch.nn.Module")
    if cfg.enabled and not any(p.requires_grad for p in adapted.parameters()):
        raise ConfigError(f"model.adapter.kind={cfg.kind} left no parameter to train")
    return adapted


def _matches(name: str, target: str) -> bool:
    """peft's rule for a list of target modules: the module's name is the target, or ends with ``.target``."""
    return name == target or name.endswith(f".{target}")


def _candidates(part: nn.Module) -> str:
    """A few names a target could take: the distinct last names of the part's linear layers, in order."""
    names = dict.fromkeys(name.rsplit(".", 1)[-1] for name, m in part.named_modules() if isinstance(m, nn.Linear))
    shown = list(names)[:8]
    return ", ".join(shown) + (", ..." if len(names) > len(shown) else "") if shown else "none (no nn.Linear)"


def _check_targets(part: nn.Module, targets: tuple[str, ...] | None) -> None:
    if targets is None:
        return
    names = [name for name, _ in part.named_modules() if name]
    missing = [t for t in targets if not any(_matches(name, t) for name in names)]
    if missing:
        raise ConfigError(
            f"model.adapter.target_modules: {', '.join(missing)} match no module of the model; its linear layers"
            f" include {_candidates(part)}"
        )


def _set_part(module: nn.Module, part: str, value: nn.Module) -> nn.Module:
    """``module`` with its submodule ``part`` replaced by ``value`` (``value`` itself for the whole module)."""
    if not part:
        return value
    parent_name, _, leaf = part.rpartition(".")
    parent = module.get_submodule(parent_name) if parent_name else module
    setattr(parent, leaf, value)
    return module


@register_adapter(LoraFaAdapter)
@register_adapter(LoraAdapter)
def lora(cfg: LoraAdapter, module: nn.Module, target: AdapterTarget) -> nn.Module:
    """peft's LoRA on ``target.part`` of ``module``; under LoRA-FA every ``lora_A`` is then frozen at the init
    peft gave it (kaiming-uniform, from torch's generator: the caller's seed), so only B and the head train."""
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    part = module.get_submodule(target.part) if target.part else module
    _check_targets(part, cfg.target_modules)
    config = LoraConfig(
        r=cfg.r,
        lora_alpha=cfg.alpha,  # type: ignore[arg-type]  # peft annotates int; the scale alpha / r is a float
        lora_dropout=cfg.dropout,
        target_modules=list(cfg.target_modules) if cfg.target_modules is not None else None,
        modules_to_save=list(target.head) or None,
        task_type=target.task,
    )
    try:
        with warnings.catch_warnings():  # transformers' deprecation of a name peft still reads: not the user's
            warnings.simplefilter("ignore", FutureWarning)
            peft_model = get_peft_model(part, config)
    except ValueError as exc:  # no default targets for the architecture, or a target peft cannot wrap
        first = str(exc).splitlines()[0]
        raise ConfigError(
            f"model.adapter.target_modules: {first} (the model's linear layers include {_candidates(part)})"
        ) from None
    if not cfg.trains_a:
        for layer in peft_model.modules():
            if isinstance(layer, LoraLayer):
                for factor in layer.lora_A.values():
                    factor.requires_grad_(False)
    return _set_part(module, target.part, peft_model)


def peft_models(module: nn.Module) -> list[Any]:
    """The peft models inside ``module`` (none where peft was never imported: no adapter was built)."""
    if "peft" not in sys.modules:
        return []
    from peft import PeftModel

    return [m for m in module.modules() if isinstance(m, PeftModel)]


def save_adapter(module: nn.Module, flat: Tensor, out_dir: Path) -> Path | None:
    """Write the adapter of ``module`` with the flat state ``flat`` (the run's final model) in peft's format,
    ``out_dir/adapter/`` (adapter_config.json, adapter_model.safetensors: the adapter and the trained head), so
    ``PeftModel.from_pretrained(AutoModelFor...from_pretrained(base), out_dir/adapter)`` is the run's model.
    Staged under a temporary name and renamed. Returns the directory, or None where the model holds no peft
    adapter (none, or your own adapter kind built without peft: its export is yours)."""
    found = peft_models(module)
    if len(found) != 1:
        return None
    load_flat(module, flat.to(next(iter(module.parameters())).device))
    final, staged = out_dir / ADAPTER_DIR, out_dir / f".{ADAPTER_DIR}.tmp"
    shutil.rmtree(staged, ignore_errors=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # as in lora(): transformers' deprecation, peft's call
        found[0].save_pretrained(staged)
    if final.exists():
        shutil.rmtree(final)
    os.replace(staged, final)
    return final
