"""The saved-tensor meter counts activations kept for backward, not parameters, and each storage once."""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import BertModel

from fedsim.split.lora import Mode, add_adapters
from fedsim.split.memory import SavedTensorMeter
from fedsim.split.model import split_encoder


def test_counts_the_input_once_and_no_weights() -> None:
    torch.manual_seed(0)
    q, k = nn.Linear(64, 32, bias=False), nn.Linear(64, 32, bias=False)
    model = nn.ModuleList([q, k])
    x = torch.randn(10, 64, requires_grad=True)
    meter = SavedTensorMeter(model)
    with meter.measure():
        loss = (q(x) * k(x)).sum()  # both linears save x; the product saves both outputs
    assert meter.bytes == 10 * 64 * 4 + 2 * 10 * 32 * 4
    loss.backward()
    with meter.measure():
        q(x.detach()).sum()  # nothing needs a gradient but the weight: x is saved for it
    assert meter.bytes == 10 * 64 * 4
    assert meter.peak == 10 * 64 * 4 + 2 * 10 * 32 * 4


def _saved(encoder: BertModel, mode: Mode) -> int:
    _, top = split_encoder(copy.deepcopy(encoder), 3, num_labels=2)
    add_adapters(top.layers, mode, r=8, alpha=16, seed=0)
    hidden = torch.randn(8, 20, 384)
    mask = torch.ones(8, 20, dtype=torch.long)
    meter = SavedTensorMeter(top)
    with meter.measure():
        top(hidden, mask).sum()
    return meter.bytes


def test_lora_fa_saves_less_than_lora(pretrained: BertModel) -> None:
    fa, lora = _saved(pretrained, "lora_fa"), _saved(pretrained, "lora")
    assert 0 < fa < 0.8 * lora
