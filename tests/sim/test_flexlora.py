"""``flexlora``: FlexLoRA's aggregation of plain LoRA adapters, against the paper's formula written here in numpy.

Reference: Bai et al., NeurIPS 2024 (arXiv 2402.11505), Figure 2, as the authors' code does it
(github.com/alibaba/FederatedScope, branch FlexLoRA: ``fed_utils/model_aggregation.py``, ``FlexLoRA``, sums each
client's ``B_k A_k`` times its data share ``n_k / N``; ``fed_utils/adaptive_peft.py``, ``distribute_weight_fast``,
takes the SVD ``U S V^T`` of that sum and sets ``lora_B = U[:, :r] diag(S[:r])``, ``lora_A = V^T[:r, :]``, the
LoRA scaling divided out of B, which here cancels as one constant per layer). The clients' factors are the
round's start plus each one's upload as the server gathered it (recorded by a stage before FlexLoRA's); the
data shares are the clients' sample counts, which the test chose. fedsim departs in giving every client one
rank r: the global and every client's factors are the first r components, where the paper gives a client of
rank r_i the first r_i.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import peft
import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from fedsim import Simulation
from fedsim.api.launch import build_engine
from fedsim.config import ConfigError, parse_config
from fedsim.data.base import ArrayDataset
from tests.adapters.runs import record_rows, sized_clients
from tests.conftest import tiny_config

SIZES = [4, 8, 12]
RANK = 2
LAYERS = ("fc1", "fc2")


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.head = nn.Linear(8, 16), nn.Linear(16, 12), nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


def _model(frozen_a: bool = False) -> nn.Module:
    """Plain LoRA at rank 2 on fc1 (16 x 8) and fc2 (12 x 16), the head trained whole (peft's
    ``modules_to_save``); B drawn off zero so that A trains from the first step."""
    torch.manual_seed(3)
    config = peft.LoraConfig(r=RANK, lora_alpha=4, target_modules=list(LAYERS), modules_to_save=["head"])
    model = peft.get_peft_model(_Net(), config)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            nn.init.normal_(p, std=0.3)
        if "lora_A" in name and frozen_a:
            p.requires_grad_(False)
    return model


def _data() -> ArrayDataset:
    return sized_clients(SIZES)


def _tree(rounds: int = 1, **over: Any) -> dict[str, Any]:
    return tiny_config(
        data={"dataset": "digits", "clients": len(SIZES)},
        clients_per_round=len(SIZES),
        rounds=rounds,
        eval_every=0,
        algorithm={"kind": "fedavg", "lr": 0.3, "batch_size": 4, "local_epochs": 4},
        **over,
    )


def _pieces(flat: np.ndarray, start: nn.Module) -> dict[str, np.ndarray]:
    """``flat`` cut into the trained parameters of ``start`` in named_parameters' order, by name."""
    out, offset = {}, 0
    for name, p in start.named_parameters():
        if p.requires_grad:
            out[name] = flat[offset : offset + p.numel()].reshape(tuple(p.shape))
            offset += p.numel()
    return out


def _factor(pieces: dict[str, np.ndarray], layer: str, which: str) -> np.ndarray:
    (name,) = [n for n in pieces if f".{layer}.lora_{which}." in n]
    return pieces[name]


def _one_round(tmp_path: Path) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """One round of FlexLoRA: the start's trained parameters, each client's factors and head as uploaded (start
    plus upload), the new global model's. A stage after FlexLoRA's reads rows whose LoRA parts are the change to
    the new factors (so the summed update stays their weighted sum) and whose head parts are the uploads."""
    rows, after = tmp_path / "rows.safetensors", tmp_path / "after.safetensors"
    tree = _tree(server_stages=[record_rows(rows), {"kind": "flexlora"}, record_rows(after)])
    model = _model()
    flat = torch.cat([p.detach().flatten() for p in model.parameters() if p.requires_grad])
    start = _pieces(flat.double().numpy(), model)
    Simulation(tree, data=_data(), model=model, out=tmp_path / "o", db=tmp_path / "r.db").run()
    uploads = {int(c): r.double().numpy() for c, r in load_file(rows).items()}
    fresh = _model()
    clients = [{k: start[k] + v for k, v in _pieces(uploads[c], fresh).items()} for c in range(len(SIZES))]
    final = _pieces(load_file(tmp_path / "o" / "model.safetensors")["global"].double().numpy(), fresh)
    for c, row in load_file(after).items():  # the rows a later stage reads: FlexLoRA's change as every client's
        rewritten, own = _pieces(row.double().numpy(), fresh), _pieces(uploads[int(c)], fresh)
        for name, value in rewritten.items():
            np.testing.assert_allclose(value, final[name] - start[name] if "lora" in name else own[name], atol=1e-6)
    return start, clients, final


def _metrics(db: Path) -> dict[str, float]:
    with sqlite3.connect(db) as conn:
        (metrics,) = conn.execute("SELECT metrics_json FROM rounds").fetchone()
    return {k: v for k, v in json.loads(metrics).items() if k.startswith("flexlora.")}


def _reference(clients: list[dict[str, np.ndarray]], layer: str) -> tuple[np.ndarray, np.ndarray, float]:
    """FlexLoRA's factors for ``layer`` from the paper's formula: the SVD of ``sum_k p_k B_k A_k``, p_k the data
    shares; ``(U_r S_r, V_r^T, ||W - W_r|| / ||W||)``."""
    p = np.array(SIZES, dtype=np.float64) / sum(SIZES)
    w = sum(p[k] * _factor(c, layer, "B") @ _factor(c, layer, "A") for k, c in enumerate(clients))
    u, s, vt = np.linalg.svd(w)
    return u[:, :RANK] * s[:RANK], vt[:RANK], float(np.sqrt((s[RANK:] ** 2).sum() / (s**2).sum()))


def test_flexlora_sets_the_truncated_svd_of_the_clients_mean_product(tmp_path: Path) -> None:
    """The new global B A is the rank-2 truncated SVD of the data-weighted mean of the clients' B_k A_k, B is
    ``U_r S_r`` and A is ``V_r^T`` (each component up to the SVD's sign); the head is the plain weighted mean of
    the clients' heads; ``flexlora.dropped_*`` is the truncation's relative error. That product is not FedAvg's
    ``mean(B_k) mean(A_k)`` on the same uploads, and the truncation drops something: both tests could fail."""
    start, clients, new = _one_round(tmp_path)
    p = np.array(SIZES, dtype=np.float64) / sum(SIZES)
    dropped = []
    for layer in LAYERS:
        ref_b, ref_a, drop = _reference(clients, layer)
        dropped.append(drop)
        got_b, got_a = _factor(new, layer, "B"), _factor(new, layer, "A")
        np.testing.assert_allclose(got_b @ got_a, ref_b @ ref_a, atol=1e-5, rtol=0)
        for i in range(RANK):
            sign = np.sign(got_a[i] @ ref_a[i])
            np.testing.assert_allclose(got_b[:, i], sign * ref_b[:, i], atol=1e-5, rtol=0)
            np.testing.assert_allclose(got_a[i], sign * ref_a[i], atol=1e-5, rtol=0)
        fedavg = sum(p[k] * _factor(c, layer, "B") for k, c in enumerate(clients)) @ sum(
            p[k] * _factor(c, layer, "A") for k, c in enumerate(clients)
        )
        # measured 1.4% (fc1) and 1.8% (fc2) apart; the truncation drops 2.5% and 3.0% of W
        assert np.linalg.norm(got_b @ got_a - fedavg) > 5e-3 * np.linalg.norm(fedavg), layer
        assert drop > 5e-3, layer  # the mean of three rank-2 products has rank above 2
    heads = [n for n in start if ".head." in n and "lora" not in n]
    assert heads  # the head trains whole, and the rule averages it as usual
    for name in heads:
        np.testing.assert_allclose(new[name], sum(p[k] * c[name] for k, c in enumerate(clients)), atol=1e-6, rtol=0)
    reported = _metrics(tmp_path / "r.db")
    assert reported["flexlora.dropped_max"] == pytest.approx(max(dropped), rel=1e-4)
    assert reported["flexlora.dropped_mean"] == pytest.approx(sum(dropped) / len(dropped), rel=1e-4)


def test_a_run_cut_after_round_one_and_resumed_ends_on_the_whole_runs_weights(tmp_path: Path) -> None:
    tree = _tree(rounds=3, server_stages=[{"kind": "flexlora"}], checkpoint={"every": 1})
    whole = Simulation(tree, data=_data(), model=_model(), out=tmp_path / "whole", db=tmp_path / "r.db")
    whole.run()
    cut = Simulation(tree, data=_data(), model=_model(), out=tmp_path / "cut", db=tmp_path / "r.db")
    cut.engine.run(after_round=lambda row: row.round == 0)
    after_one = load_file(tmp_path / "cut" / "model.safetensors")["global"]
    cfg = parse_config(json.loads((tmp_path / "cut" / "config.json").read_text()))
    build_engine(cfg, tmp_path / "cut", tmp_path / "r.db", resume=True, dataset=_data(), model=_model()).run()
    weights = [load_file(tmp_path / run / "model.safetensors")["global"] for run in ("whole", "cut")]
    assert torch.equal(weights[0], weights[1])
    assert not torch.equal(after_one, weights[0])  # the resumed run trained rounds 2 and 3


def _refusal(**over: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(tiny_config(server_stages=[{"kind": "flexlora"}], **over))
    message = str(caught.value)
    assert "\n" not in message.strip(), message
    return message


def test_what_hides_or_replaces_the_rows_is_refused_in_one_line() -> None:
    """From the declarations: it reads rows (SecAgg+ hides them), runs before the rule (central DP's sum) and
    sets the update (a gathering rule would replace it; an algorithm that does not add the rows' mean, FedNova's
    step-normalised average, would not take it)."""
    secagg = {"kind": "secagg_plus", "num_shares": 3, "reconstruction_threshold": 2}
    assert "server_stages: flexlora reads each client's update, which secagg hides" in _refusal(secagg=secagg)
    central = {"kind": "central", "clip": 1.0, "noise_multiplier": 1.0}
    assert "server_stages: flexlora at before_rule would change the sum before DP's release" in _refusal(
        privacy=central
    )
    assert (
        "server_stages: flexlora sets the round's update from the clients' rows, but aggregator.kind=median"
        " combines the rows it gathered itself and would replace it"
    ) in _refusal(aggregator={"kind": "median"})
    assert (  # FedNova rescales each client's update by its steps: the factors the stage sets would not be taken
        "server_stages: flexlora sets the round's update from the clients' rows, but algorithm.kind=fednova does"
        " not add their mean to the model (it declares adds_mean False"
    ) in _refusal(algorithm={"kind": "fednova", "lr": 0.1})


def test_a_model_without_a_trained_lora_a_is_refused_in_one_line(tmp_path: Path) -> None:
    tree = _tree(server_stages=[{"kind": "flexlora"}])
    with pytest.raises(ConfigError) as caught:
        Simulation(tree, data=_data(), model=_model(frozen_a=True), out=tmp_path / "fa", db=tmp_path / "r.db")
    message = str(caught.value)
    assert message.startswith("server_stages: flexlora: ") and "\n" not in message.strip(), message
    assert "fc1's lora_A is frozen (LoRA-FA?)" in message and "flexlora changes nothing" in message
    with pytest.raises(ConfigError, match=r"^server_stages: flexlora: .*the model has no trained lora_B"):
        Simulation(parse_config(tiny_config(server_stages=[{"kind": "flexlora"}])), out=tmp_path / "o")
