"""A LoRA-FA adapter composed with the round's other stages: SecAgg+, an attack under a robust rule, FedBuff and
an uplink compressor. Each run is a tiny GPT-2 built from its config (2 layers of width 32, nothing downloaded)
with LoRA-FA (Zhang et al. 2023) at rank 4 on its attention's ``c_attn``, so a client's state and upload are the
two B factors alone: 2 x 96 x 4 = 768 floats of the model's 28,800. Each test reads what a user reads: the
bytes of summary.json, the weights of model.safetensors, and its references are written here from the papers'
definitions, not from fedsim's code."""

from __future__ import annotations

import json
import math
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from torch import Tensor

from fedsim import Simulation
from fedsim.config import ModelConfig
from fedsim.data.base import ArrayDataset, ClientData
from fedsim.models import build_model
from fedsim.robust.gather import GatheredRows
from fedsim.robust.median import Median
from tests.conftest import tiny_config

pytestmark = pytest.mark.filterwarnings("ignore:fan_in_fan_out is set to False:UserWarning")  # GPT-2's Conv1D

VOCAB, LENGTH = 64, 8
SIZES = [4, 8, 6, 5, 7, 6]  # the clients' sentences: FedAvg weighs them by these
GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": LENGTH}
MODEL = {"kind": "hf_causal_lm", "config": GPT2, "adapter": {"kind": "lora_fa", "r": 4, "alpha": 8}}
ADAPTER = 2 * 96 * 4  # each layer's c_attn maps 32 to 3 x 32: its B is 96 x 4
FLOAT32 = 4
UPLOAD = ADAPTER * FLOAT32 + FLOAT32  # the update and the client's weight


def _model() -> torch.nn.Module:
    return build_model(ModelConfig.model_validate(MODEL), (LENGTH,), VOCAB, seed=0)


def _initial() -> Tensor:
    return torch.cat([p.detach().reshape(-1) for p in _model().parameters() if p.requires_grad])


def _data() -> ArrayDataset:
    """Random sentences of 8 token ids and their next-token targets, the last position ignored."""
    g = torch.Generator().manual_seed(0)
    n = sum(SIZES)
    ids = torch.randint(1, VOCAB, (n + 16, LENGTH), generator=g)
    targets = torch.roll(ids, -1, 1)
    targets[:, -1] = -100
    parts = [np.arange(a, b) for a, b in pairwise(np.cumsum([0, *SIZES]))]
    return ArrayDataset(ids[:n].float(), targets[:n], parts, ClientData(ids[n:].float(), targets[n:]), VOCAB)


def _run(tmp_path: Path, name: str, rounds: int = 1, **sections: Any) -> tuple[dict[str, Any], Tensor]:
    """A run of every client each round; its summary.json and final weights."""
    tree = tiny_config(
        data={"dataset": "digits", "clients": len(SIZES)},
        clients_per_round=len(SIZES),
        rounds=rounds,
        eval_every=0,
        task={"kind": "language_model"},
        model=MODEL,
        algorithm={"kind": "fedavg", "lr": 0.5, "batch_size": 4},
        checkpoint={"every": 0},
    )
    tree.update(sections)
    Simulation(tree, data=_data(), out=tmp_path / name, db=tmp_path / "runs.db").run()
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    return summary, load_file(tmp_path / name / "model.safetensors")["global"]


def test_the_adapter_is_a_small_part_of_the_model() -> None:
    model = _model()
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == ADAPTER
    assert sum(p.numel() for p in model.parameters()) == 28_800
    assert all("lora_B" in n for n, p in model.named_parameters() if p.requires_grad)


@pytest.mark.slow
def test_secagg_plus_aggregates_the_adapter_as_the_plain_round_does_within_its_quantisation(tmp_path: Path) -> None:
    """SecAgg+ as Flower's SecAggPlusWorkflow quantises (Bell et al., CCS 2020; Flower's ``quantize``): each
    client's update times ``w_k / max_weight`` is clipped to [-c, c] and stochastically rounded onto Q levels
    over that range, so each value moves by less than one level, ``2 c / Q``. The server's mean of n clients is
    then off the plain mean by less than ``n (2 c / Q) max_weight / sum_k w_k`` at every coordinate (c 8 and Q
    2^22, Flower's defaults). At Flower's max_weight 1000 that is 6.4e-4 here (measured at most 2.8e-4), and the
    relative error summary.json reports is 8.4%: clients of 4 to 8 sentences get a 125th of the range at most.
    At max_weight 8, the largest client's weight, the bound is 5.1e-6 and the error 0.09%. The masked vector
    each client sends is the adapter's length."""
    _, plain = _run(tmp_path, "plain")
    initial = _initial()
    reference = (plain - initial).double()
    assert float(reference.abs().max()) > 1e-3  # the clients moved the adapter
    c, levels, n = 8.0, 2**22, len(SIZES)
    relative = {}
    for max_weight in (1000.0, 8.0):
        secagg = {"kind": "secagg_plus", "num_shares": 3, "reconstruction_threshold": 2, "max_weight": max_weight}
        summary, masked = _run(tmp_path, f"secagg-{max_weight:g}", secagg=secagg)
        bound = n * (2 * c / levels) * max_weight / sum(SIZES)
        error = (masked - initial).double() - reference
        assert 0 < float(error.abs().max()) <= bound * (1 + 1e-3), (max_weight, float(error.abs().max()), bound)
        relative[max_weight] = float(error.norm() / reference.norm())
        assert relative[max_weight] == pytest.approx(summary["secagg"]["quantization_error"], rel=1e-3)

        per_client = summary["secagg"]["bytes_up_per_client"]
        masked_vector = (2 + ADAPTER) * FLOAT32  # the weight, DP's bit, the adapter: integers modulo 2^32
        assert masked_vector <= per_client < masked_vector + 1024  # keys and shares: well under a kilobyte
        assert per_client < 0.05 * 28_800 * FLOAT32
    assert relative[8.0] < relative[1000.0] / 50


@pytest.mark.slow
def test_a_sign_flip_attack_under_the_median_reads_the_adapter_rows_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The median (Yin et al., ICML 2018) is given one row per client of the adapter's 768 values, not the
    model's 28,800; the malicious client's row is its honest update negated (sign flip, as the attack's
    definition says), every other row the honest run's; and the new model is the initial one plus numpy's
    coordinate-wise median of those rows."""
    seen: list[Tensor] = []
    aggregate = Median.aggregate

    def spy(self: Median, rows: GatheredRows) -> Tensor:
        seen.append(rows.rows.clone())
        return aggregate(self, rows)

    monkeypatch.setattr(Median, "aggregate", spy)
    _run(tmp_path, "honest", aggregator={"kind": "median"})
    attack = {"kind": "sign_flip", "fraction": 0.2}
    summary, final = _run(tmp_path, "attacked", attack=attack, aggregator={"kind": "median"})
    honest, attacked = seen
    assert attacked.shape == (len(SIZES), ADAPTER)
    flipped = [k for k in range(len(SIZES)) if not torch.equal(attacked[k], honest[k])]
    assert len(flipped) == summary["attack"]["malicious_turns"] == 1
    assert torch.equal(attacked[flipped[0]], -honest[flipped[0]])

    median = np.median(attacked.double().numpy(), axis=0)  # the mean of the middle two of 6
    torch.testing.assert_close((final - _initial()).double(), torch.from_numpy(median), rtol=1e-5, atol=1e-8)


@pytest.mark.slow
def test_fedbuff_with_an_adapter_uploads_the_adapter_each_arrival(tmp_path: Path) -> None:
    """FedBuff (Nguyen et al., AISTATS 2022) steps the server every ``buffer`` arrivals: 3 steps of 3 arrivals,
    each the adapter's 768 floats and the client's weight; every download is the adapter alone too."""
    summary, final = _run(
        tmp_path,
        "fedbuff",
        rounds=3,
        clients_per_round=None,
        asynchronous={"kind": "fedbuff", "concurrency": 4, "buffer": 3},
        clock={"kind": "trace"},
    )
    assert summary["asynchronous"]["server_steps"] == 3
    assert summary["bytes_up"] == 3 * 3 * UPLOAD
    assert summary["bytes_down"] > 0 and summary["bytes_down"] % (ADAPTER * FLOAT32) == 0
    assert final.numel() == ADAPTER
    assert float((final - _initial()).abs().max()) > 1e-3


def _matrices() -> list[tuple[int, int]]:
    return [tuple(p.shape) for p in _model().parameters() if p.requires_grad]  # type: ignore[misc]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("uplink", "sent"),
    [
        # Stich et al. 2018: the k = ceil(0.1 x 768) entries of largest magnitude, an int32 index and a float32 each
        ({"kind": "topk", "fraction": 0.1}, lambda: 8 * math.ceil(0.1 * ADAPTER)),
        # Vogels et al. 2019: each B (n x m) as P (n x r) and Q (m x r), float32
        ({"kind": "powersgd", "rank": 1}, lambda: FLOAT32 * sum(n + m for n, m in _matrices())),
    ],
    ids=["topk", "powersgd"],
)
def test_a_compressor_with_error_feedback_shrinks_the_adapter_upload(
    tmp_path: Path, uplink: dict[str, Any], sent: Any
) -> None:
    """Two rounds of six clients: the dense adapter upload is 3,076 bytes; top-k at 10% sends 620, PowerSGD at
    rank 1 sends 804 (the B factors' 2 x (96 + 4) floats), as each paper's message is sized; the error
    feedback's residual is each client's state, on disk the adapter's 768 floats (and PowerSGD's Q, 2 x 4)."""
    plain, _ = _run(tmp_path, "plain", rounds=2)
    summary, final = _run(tmp_path, uplink["kind"], rounds=2, uplink=uplink, state={"backend": "disk"})
    uploads = 2 * len(SIZES)
    assert plain["bytes_up"] == summary["bytes_up_uncompressed"] == uploads * UPLOAD
    assert summary["bytes_up"] == uploads * (sent() + FLOAT32)
    assert summary["bytes_up"] < plain["bytes_up"] / 3
    assert final.numel() == ADAPTER
    states = [load_file(path) for path in sorted((tmp_path / uplink["kind"] / "state").glob("*.safetensors"))]
    assert len(states) == len(SIZES)
    assert all(state["uplink.residual"].numel() == ADAPTER for state in states)
