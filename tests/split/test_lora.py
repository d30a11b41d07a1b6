"""LoRA-FA's custom backward equals autograd's, keeps x A^T instead of x, and its adapters load in peft."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from fedsim.split.lora import LoRALinear, add_adapters, load_adapters, save_adapters
from fedsim.split.model import load_encoder, split_encoder


def _linear(seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(24, 16)


def test_lora_fa_gradients_equal_plain_autograd() -> None:
    fa = LoRALinear(_linear(), r=4, alpha=8, mode="lora_fa")
    with torch.no_grad():
        fa.lora_B.normal_()  # B = 0 would hide mistakes in dx's adapter term
    ref_a, ref_b = fa.lora_A.detach().clone(), fa.lora_B.detach().clone().requires_grad_(True)
    x = torch.randn(3, 5, 24, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_(True)
    target = torch.randn(3, 5, 16)

    ((fa(x) - target) ** 2).sum().backward()
    ref = fa.base(x_ref) + fa.scale * (x_ref @ ref_a.t()) @ ref_b.t()
    ((ref - target) ** 2).sum().backward()

    assert fa.lora_A.grad is None and fa.base.weight.grad is None  # A and W stay frozen
    assert fa.lora_B.grad is not None and x.grad is not None and x_ref.grad is not None and ref_b.grad is not None
    torch.testing.assert_close(fa.lora_B.grad, ref_b.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-5, atol=1e-5)


def _saved_bytes(module: nn.Module, x: torch.Tensor) -> int:
    params = {p.data_ptr() for p in module.parameters()}
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        if t.data_ptr() not in params:
            total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x).sum()
    return total


def test_lora_fa_saves_xa_not_x() -> None:
    x = torch.randn(8, 32, 24, requires_grad=True)
    fa = LoRALinear(_linear(), r=4, alpha=8, mode="lora_fa")
    lora = LoRALinear(_linear(), r=4, alpha=8, mode="lora")
    assert _saved_bytes(fa, x) == 8 * 32 * 4 * 4  # x A^T only: r = 4 floats per token
    assert _saved_bytes(lora, x) >= 8 * 32 * 24 * 4  # x itself: 24 floats per token


def test_adapters_load_in_peft_and_give_the_same_encoder(tmp_path: Path) -> None:
    peft = pytest.importorskip("peft")
    encoder = load_encoder()
    bottom, top = split_encoder(encoder, 3, num_labels=2)
    adapters = add_adapters(top.layers, "lora_fa", r=4, alpha=8, seed=0)
    assert len(adapters) == 3 * 6
    with torch.no_grad():
        for adapter in adapters:
            adapter.lora_B.normal_(std=0.02)  # as if trained
    save_adapters(tmp_path, top.layers, 3, top.classifier, r=4, alpha=8, base="all-MiniLM-L6-v2")

    ids = torch.tensor([[101, 2023, 3185, 2001, 2307, 102, 0, 0], [101, 6659, 102, 0, 0, 0, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        ours = top.encode(bottom(ids, mask), mask)
        peft_model = peft.PeftModel.from_pretrained(load_encoder(), tmp_path)
        theirs = peft_model(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    torch.testing.assert_close(ours[real], theirs[real], rtol=0, atol=1e-5)

    # and back into a fresh top: same adapters, same head
    _, top2 = split_encoder(load_encoder(), 3, num_labels=2)
    add_adapters(top2.layers, "lora_fa", r=4, alpha=8, seed=1)
    load_adapters(tmp_path, top2.layers, 3, top2.classifier)
    loaded = [m for m in top2.modules() if isinstance(m, LoRALinear)]
    for a, b in zip(adapters, loaded, strict=True):
        assert torch.equal(a.lora_B, b.lora_B) and torch.equal(a.lora_A, b.lora_A)
    assert torch.equal(top.classifier.weight, top2.classifier.weight)
