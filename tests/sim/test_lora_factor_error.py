"""``lora_factor_error``: plain LoRA's factor-averaging error, reported each round, against the same error worked
out in the test from the clients' uploads with plain torch (each client's new factors ``B_k = B + dB_k``,
``A_k = A + dA_k``; FedAvg's weights, the clients' sample counts, which the test chose; the relative Frobenius
norm of ``sum_k w_k B_k A_k - (sum_k w_k B_k)(sum_k w_k A_k)``, as FFA-LoRA, Sun et al. ICLR 2024, Section 3,
writes the discrepancy). LoRA-FA reports 0: its A is frozen."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import peft
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from fedsim import Simulation
from fedsim.config import ConfigError, parse_config
from fedsim.data.base import ArrayDataset
from tests.adapters.runs import record_rows, sized_clients
from tests.conftest import tiny_config

SIZES = [4, 8, 12]


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.tanh(self.fc1(x)))


def _model(frozen_a: bool) -> nn.Module:
    torch.manual_seed(3)
    model = peft.get_peft_model(_Net(), peft.LoraConfig(r=2, lora_alpha=4, target_modules=["fc1", "fc2"]))
    for name, p in model.named_parameters():
        if "lora_B" in name:  # B off zero, so that A trains from the first step
            nn.init.normal_(p, std=0.3)
        p.requires_grad_(("lora_B" in name) or ("lora_A" in name and not frozen_a))
    return model


def _data() -> ArrayDataset:
    return sized_clients(SIZES)


def _run(tmp_path: Path, frozen_a: bool) -> tuple[nn.Module, dict[int, torch.Tensor], dict[str, float]]:
    rows = tmp_path / "rows.safetensors"
    tree = tiny_config(
        data={"dataset": "digits", "clients": len(SIZES)},
        clients_per_round=len(SIZES),
        rounds=1,
        eval_every=0,
        algorithm={"kind": "fedavg", "lr": 0.3, "batch_size": 4, "local_epochs": 4},
        server_stages=[record_rows(rows), {"kind": "lora_factor_error"}],
    )
    model = _model(frozen_a)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    Simulation(tree, data=_data(), model=model, out=tmp_path / "o", db=tmp_path / "r.db").run()
    with sqlite3.connect(tmp_path / "r.db") as db:
        (metrics,) = db.execute("SELECT metrics_json FROM rounds").fetchone()
    reported = {k.split(".", 1)[1]: v for k, v in json.loads(metrics).items() if k.startswith("lora_factor_error.")}
    fresh = _model(frozen_a)  # the round's start, as the run began
    for n, p in fresh.named_parameters():
        p.data.copy_(start[n])
    return fresh, {int(c): r for c, r in load_file(rows).items()}, reported


def _reference(start: nn.Module, uploads: dict[int, torch.Tensor]) -> list[float]:
    trained = [(n, p) for n, p in start.named_parameters() if p.requires_grad]
    w = torch.tensor(SIZES, dtype=torch.float64) / sum(SIZES)
    errors = []
    for layer in ("fc1", "fc2"):
        factors = {}
        for k in range(len(SIZES)):
            offset = 0
            for name, p in trained:
                if f"{layer}.lora_" in name:
                    factors[k, name.split(".lora_")[1][0]] = p.detach().double() + uploads[k][
                        offset : offset + p.numel()
                    ].double().view_as(p)
                offset += p.numel()
        mean_bA = sum(w[k] * factors[k, "B"] @ factors[k, "A"] for k in range(len(SIZES)))
        mean_b = sum(w[k] * factors[k, "B"] for k in range(len(SIZES)))
        mean_a = sum(w[k] * factors[k, "A"] for k in range(len(SIZES)))
        assert isinstance(mean_bA, torch.Tensor) and isinstance(mean_b, torch.Tensor)
        errors.append(float((mean_bA - mean_b @ mean_a).norm() / mean_bA.norm()))
    return errors


def test_plain_loras_factor_error_is_the_mean_of_products_against_the_product_of_means(tmp_path: Path) -> None:
    start, uploads, reported = _run(tmp_path, frozen_a=False)
    errors = _reference(start, uploads)
    assert reported["max"] == pytest.approx(max(errors), rel=1e-4)
    assert reported["mean"] == pytest.approx(sum(errors) / 2, rel=1e-4)
    assert max(errors) > 1e-3  # the clients' A moved apart: there is an error to measure


def test_lora_fa_reports_no_error(tmp_path: Path) -> None:
    _, _, reported = _run(tmp_path, frozen_a=True)
    assert reported == {"max": 0.0, "mean": 0.0}


def test_a_model_without_lora_is_refused_in_one_line(tmp_path: Path) -> None:
    tree = tiny_config(server_stages=[{"kind": "lora_factor_error"}])
    with pytest.raises(ConfigError, match=r"^server_stages: lora_factor_error: .*the model has no trained lora_B"):
        Simulation(parse_config(tree), out=tmp_path / "o", db=tmp_path / "r.db")
