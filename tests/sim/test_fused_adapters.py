"""Fused adapters: K clients' LoRA (or LoRA-FA) adapters trained over one shared frozen base, as the sequential
executor trains them one at a time (float summation order aside).

The model is a tiny BERT built here (no download) and adapted with peft, as a user adapts a pretrained one:
LoRA (Hu et al., 2021) on the query and value projections with a new classification head
(``modules_to_save``); LoRA-FA (Zhang et al., 2023) freezes every ``lora_A`` at its random initialisation and
trains ``lora_B`` alone. Dropout is off (the base's and LoRA's), so the fused run's clients see what the
sequential run's see; with dropout on, the fused executor draws each client's masks from another stream.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import peft
import pytest
import torch
import transformers
from torch import Tensor, nn

from fedsim.config import ConfigError, parse_config
from fedsim.data.base import ArrayDataset, ClientData
from fedsim.models.replica import Replica
from fedsim.sim.executors.fused import FusedExecutor
from fedsim.sim.executors.shared_base import SharedBaseForward
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config

VOCAB, LENGTH, CLASSES, K = 120, 12, 3, 4
SIZES = [20, 24, 13, 30, 17, 24, 9, 28]  # unequal clients: short last batches are padded and masked
ATOL = 1e-5


class TokenClassifier(nn.Module):
    """Token ids stored as floats in, logits out; id 0 is padding, masked out of attention."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        ids = x.long()
        logits: Tensor = self.model(input_ids=ids, attention_mask=(ids != 0).long()).logits
        return logits


def adapted_bert(kind: str, **lora: Any) -> TokenClassifier:
    """A two-layer BERT (hidden 32) under peft: ``lora`` or ``lora_fa`` (every lora_A frozen) on query and
    value, the classifier trained whole; the same weights on every call."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=LENGTH,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    config.num_labels = CLASSES
    base = transformers.BertForSequenceClassification(config)
    settings = {"r": 4, "lora_alpha": 8, "lora_dropout": 0.0, **lora}
    model = peft.get_peft_model(
        base, peft.LoraConfig(target_modules=["query", "value"], modules_to_save=["classifier"], **settings)
    )
    if kind == "lora_fa":
        for name, p in model.named_parameters():
            if "lora_A" in name:
                p.requires_grad_(False)
    return TokenClassifier(model)


def token_data() -> ArrayDataset:
    """Random sentences of 12 token ids with 0 to 5 trailing pads, labels from their first token."""
    g = torch.Generator().manual_seed(1)
    n = sum(SIZES) + 16
    ids = torch.randint(1, VOCAB, (n, LENGTH), generator=g)
    pads = torch.randint(0, 6, (n,), generator=g)
    ids[torch.arange(LENGTH)[None, :] >= LENGTH - pads[:, None]] = 0
    labels = ids[:, 0] % CLASSES
    x, y = ids.float(), labels
    offsets = np.cumsum([0, *SIZES])
    parts = [np.arange(offsets[i], offsets[i + 1]) for i in range(len(SIZES))]
    return ArrayDataset(x[: offsets[-1]], y[: offsets[-1]], parts, ClientData(x[-16:], y[-16:]), CLASSES)


def _engine(tmp_path: Path, executor: str, model: nn.Module, rounds: int = 2) -> Engine:
    tree = tiny_config(
        rounds=rounds,
        clients_per_round=K,
        threads=1,
        algorithm={"kind": "fedavg", "lr": 0.1, "batch_size": 8, "local_epochs": 2},
        executor={"kind": executor, "clients": K},
    )
    out = tmp_path / executor
    return Engine(parse_config(tree), out_dir=out, db_path=out / "runs.db", dataset=token_data(), model=model)


@pytest.mark.parametrize("kind", ["lora", "lora_fa"])
def test_fused_adapters_train_the_sequential_weights(kind: str, tmp_path: Path) -> None:
    """Two rounds of FedAvg, four clients fused into one group: the final adapters and head are the sequential
    executor's to 1e-5, and both moved far further than that from where they started."""
    start = Replica(adapted_bert(kind)).flat
    finals = {}
    for executor in ("sequential", "fused"):
        engine = _engine(tmp_path, executor, adapted_bert(kind))
        assert engine.executor_kind == executor
        engine.run()
        finals[executor] = engine.global_state
    assert (finals["sequential"] - start).abs().max() > 100 * ATOL
    torch.testing.assert_close(finals["fused"], finals["sequential"], rtol=0, atol=ATOL)


@pytest.mark.parametrize("kind", ["lora", "lora_fa"])
def test_the_base_is_shared_and_only_the_adapters_are_stacked(kind: str, tmp_path: Path) -> None:
    """Every fused step passes the model K rows of the trained parameters alone, (K, *shape) each: LoRA's A and
    B (B alone under LoRA-FA) and the head; none of the base's parameters, which stay the module's own, unchanged
    in value and memory."""
    model = adapted_bert(kind)
    trained = {name.removeprefix("model."): p.numel() for name, p in model.named_parameters() if p.requires_grad}
    frozen = {name: (p.data_ptr(), p.detach().clone()) for name, p in model.named_parameters() if not p.requires_grad}
    engine = _engine(tmp_path, "fused", model, rounds=1)
    executor = engine.executor
    assert isinstance(executor, FusedExecutor) and isinstance(executor.forward, SharedBaseForward)
    calls: list[dict[str, torch.Size]] = []
    forward = executor.forward

    def spy(params: dict[str, Tensor], x: Tensor) -> Tensor:
        calls.append({name: p.shape for name, p in params.items()})
        return forward(params, x)

    executor.forward = spy
    engine.run()
    assert calls
    for shapes in calls:
        assert {name.removeprefix("model."): s[1:].numel() for name, s in shapes.items()} == trained
        assert all(s[0] == K for s in shapes.values())
    assert all("lora_" in name or "classifier" in name for name in trained)
    assert ("lora_A" in " ".join(trained)) == (kind == "lora")
    assert engine.replica.numel == sum(trained.values())
    assert engine.replica.numel * 10 < sum(p.numel() for p in model.parameters())  # the base is most of it
    for name, p in model.named_parameters():
        if not p.requires_grad:
            ptr, value = frozen[name]
            assert p.data_ptr() == ptr and torch.equal(p, value), name


def test_an_adapter_that_cannot_run_per_client_is_refused_in_one_line_and_auto_falls_back(tmp_path: Path) -> None:
    """DoRA's magnitude vector lives in a module that takes no batch, so the model would run whole under vmap,
    where the Hugging Face attention mask's check cannot: fused is refused in one line saying what fuses; auto
    trains sequentially."""
    with pytest.raises(ConfigError) as refusal:
        _engine(tmp_path / "a", "fused", adapted_bert("lora", use_dora=True))
    message = str(refusal.value)
    assert "\n" not in message
    assert message.startswith("executor.kind=fused: the model's forward cannot run for K clients at once (vmap:")
    assert "LoRA and LoRA-FA adapters and a new head do, DoRA's magnitudes do not" in message
    assert _engine(tmp_path / "b", "auto", adapted_bert("lora", use_dora=True)).executor_kind == "sequential"
    assert _engine(tmp_path / "c", "auto", adapted_bert("lora")).executor_kind == "fused"


class _SequenceFirst(nn.Module):
    """A frozen embedding and a trained linear layer fed (length, batch, features): the batch is not first."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 8).requires_grad_(False)
        self.head = nn.Linear(8, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        hidden = self.embed(x.long()).transpose(0, 1)  # (length, batch, 8)
        out: Tensor = self.head(hidden).mean(0)
        return out


def test_a_trained_module_whose_batch_is_not_first_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"module 'head' got an input of shape \[12, 2, 8\], not the 2 rows"):
        _engine(tmp_path, "fused", _SequenceFirst())
