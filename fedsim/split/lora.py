"""LoRA-FA (Zhang et al., 2023) and plain LoRA adapters on the linear layers of the cloud's top layers.

Both compute ``y = x W^T + b + scale * (x A^T) B^T`` with ``A`` (r x in) at kaiming-uniform init, ``B``
(out x r) at zero and ``scale = alpha / r``. LoRA trains A and B, so backward keeps the layer input ``x``.
LoRA-FA freezes A and trains only B: :class:`LoRAFAFunction` computes the whole layer and saves ``x A^T``
(r wide) instead of ``x`` (in wide), because with W and A frozen

    dB = scale * g^T (x A^T)        dx = g W + scale * (g B) A

need no ``x``. Adapters save and load in peft's format (adapter_config.json + adapter_model.safetensors), so
``peft.PeftModel.from_pretrained(BertModel, DIR)`` loads what the cloud trained.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from torch.autograd.function import FunctionCtx

Mode = Literal["lora_fa", "lora", "full"]

# BertLayer linears, as peft names them (suffix match): Q, K, V, attention output, both FFN linears
TARGETS = ("query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense")
ADAPTER_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
HEAD_FILE = "head.safetensors"


class LoRAFAFunction(torch.autograd.Function):
    """``x W^T + b + scale (x A^T) B^T`` that saves ``x A^T`` for backward, never ``x``; only B gets a gradient."""

    @staticmethod
    def forward(
        ctx: FunctionCtx, x: Tensor, weight: Tensor, bias: Tensor | None, a: Tensor, b: Tensor, scale: float
    ) -> Tensor:
        xa = x @ a.t()
        out = F.linear(x, weight, bias) + scale * (xa @ b.t())
        ctx.save_for_backward(xa, weight, a, b)
        ctx.scale = scale  # type: ignore[attr-defined]
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None, None, None, Tensor | None, None]:
        xa, weight, a, b = ctx.saved_tensors
        scale = ctx.scale
        grad_x = grad @ weight + scale * ((grad @ b) @ a) if ctx.needs_input_grad[0] else None
        grad_b = None
        if ctx.needs_input_grad[4]:
            grad_b = scale * grad.reshape(-1, grad.shape[-1]).t() @ xa.reshape(-1, xa.shape[-1])
        return grad_x, None, None, None, grad_b, None


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a rank-``r`` adapter; ``mode`` is ``lora_fa`` (A frozen) or ``lora``."""

    def __init__(self, base: nn.Linear, r: int, alpha: float, mode: Literal["lora_fa", "lora"]) -> None:
        super().__init__()
        self.base = base
        self.base.requires_grad_(False)
        self.r = r
        self.scale = alpha / r
        self.mode = mode
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features), requires_grad=mode == "lora")
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # peft's init of A

    def forward(self, x: Tensor) -> Tensor:
        if self.mode == "lora_fa":
            out: Tensor = LoRAFAFunction.apply(
                x, self.base.weight, self.base.bias, self.lora_A, self.lora_B, self.scale
            )
            return out
        return self.base(x) + self.scale * F.linear(F.linear(x, self.lora_A), self.lora_B)


def _parent(root: nn.Module, dotted: str) -> tuple[nn.Module, str]:
    *path, leaf = dotted.split(".")
    module = root
    for part in path:
        module = getattr(module, part)
    return module, leaf


def target_names(layer: nn.Module) -> list[str]:
    """Dotted names, inside one BertLayer, of the linears an adapter goes on."""
    return [name for name, mod in layer.named_modules() if isinstance(mod, nn.Linear) and name.endswith(TARGETS)]


def add_adapters(layers: nn.ModuleList, mode: Mode, r: int, alpha: float, seed: int) -> list[LoRALinear]:
    """Wrap every target linear of ``layers`` in place; ``full`` leaves them as they are and trainable.

    Returns the adapters in order; A's init is drawn from ``seed`` so runs repeat.
    """
    if mode == "full":
        layers.requires_grad_(True)
        return []
    layers.requires_grad_(False)
    adapters: list[LoRALinear] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for layer in layers:
            for name in target_names(layer):
                parent, leaf = _parent(layer, name)
                adapter = LoRALinear(getattr(parent, leaf), r, alpha, mode)
                setattr(parent, leaf, adapter)
                adapters.append(adapter)
    return adapters


def adapter_state(layers: nn.ModuleList, first_layer: int) -> dict[str, Tensor]:
    """peft's key names: ``base_model.model.encoder.layer.{i}.{path}.lora_{A,B}.weight``, global layer ``i``."""
    state = {}
    for j, layer in enumerate(layers):
        for name, mod in layer.named_modules():
            if isinstance(mod, LoRALinear):
                prefix = f"base_model.model.encoder.layer.{first_layer + j}.{name}"
                state[f"{prefix}.lora_A.weight"] = mod.lora_A.detach().contiguous()
                state[f"{prefix}.lora_B.weight"] = mod.lora_B.detach().contiguous()
    return state


def save_adapters(
    directory: Path, layers: nn.ModuleList, first_layer: int, head: nn.Module, r: int, alpha: float, base: str
) -> None:
    """Write peft's adapter_config.json and adapter_model.safetensors, and the classifier as head.safetensors.

    The files are written under temporary names and renamed, so a crash leaves the previous adapters whole.
    """
    directory.mkdir(parents=True, exist_ok=True)
    total = first_layer + len(layers)
    config = {
        "peft_type": "LORA",
        "task_type": None,
        "base_model_name_or_path": base,
        "r": r,
        "lora_alpha": alpha,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": list(TARGETS),
        "layers_to_transform": list(range(first_layer, total)),
        "layers_pattern": "layer",
        "init_lora_weights": True,
        "fan_in_fan_out": False,
        "inference_mode": True,
    }
    staged = {
        CONFIG_FILE: lambda p: p.write_text(json.dumps(config, indent=2) + "\n"),
        ADAPTER_FILE: lambda p: save_file(adapter_state(layers, first_layer), p),
        HEAD_FILE: lambda p: save_file({k: v.detach().contiguous() for k, v in head.state_dict().items()}, p),
    }
    for name, write in staged.items():
        tmp = directory / f".{name}.tmp"
        write(tmp)
        tmp.replace(directory / name)


def load_adapters(directory: Path, layers: nn.ModuleList, first_layer: int, head: nn.Module) -> None:
    """Load what :func:`save_adapters` wrote into adapters already added to ``layers`` (same r and targets)."""
    state = load_file(directory / ADAPTER_FILE)
    want = adapter_state(layers, first_layer)
    if set(state) != set(want):
        missing, extra = sorted(set(want) - set(state)), sorted(set(state) - set(want))
        raise ValueError(
            f"{directory / ADAPTER_FILE}: adapters do not match this model (missing {missing[:2]}, "
            f"unexpected {extra[:2]})"
        )
    for j, layer in enumerate(layers):
        for name, mod in layer.named_modules():
            if isinstance(mod, LoRALinear):
                prefix = f"base_model.model.encoder.layer.{first_layer + j}.{name}"
                with torch.no_grad():
                    mod.lora_A.copy_(state[f"{prefix}.lora_A.weight"])
                    mod.lora_B.copy_(state[f"{prefix}.lora_B.weight"])
    head.load_state_dict(load_file(directory / HEAD_FILE))
