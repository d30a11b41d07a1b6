"""LoRA-FA's FedAvg is exact: the server's new B times the frozen A is the clients' weighted mean full update.

With A frozen and the same on every client (drawn from the run's seed), ``sum_k w_k B_k A = (sum_k w_k B_k) A``:
averaging the uploaded B factors averages the clients' weight updates ``Delta W_k = B_k A`` themselves (Zhang et
al. 2023, arXiv:2308.03303, Section 3; Sun et al., ICLR 2024, FFA-LoRA, Section 4, which freezes A in federated
training for this reason). Plain LoRA averages A and B apart, and ``mean(B_k) mean(A_k)`` is not
``mean(B_k A_k)``. The reference reads each client's trained factors from its upload (a stage of the test's own
that records the rows the server gathers) and multiplies them with plain torch; the weights are the clients'
sample counts, which the test set itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import Tensor

from fedsim import Simulation
from tests.adapters.runs import adapter_tree, final_flat, minilm, pieces, record_rows, token_data

SIZES = [4, 8, 12]  # FedAvg weighs each client by its samples


def _round(tmp_path: Path, kind: str) -> tuple[Tensor, dict[int, Tensor]]:
    """One FedAvg round of ``kind``'s adapter over three clients, 3 local epochs of batches of 4: the new global
    flat vector and each client's upload."""
    rows = tmp_path / f"{kind}.safetensors"
    tree = adapter_tree(kind, len(SIZES), server_stages=[record_rows(rows)])
    tree["algorithm"]["local_epochs"] = 3
    Simulation(tree, data=token_data(SIZES), out=tmp_path / kind, db=tmp_path / "runs.db").run()
    return final_flat(tmp_path / kind), {int(cid): row for cid, row in load_file(rows).items()}


def _factors(flat: Tensor, kind: str) -> dict[str, Tensor]:
    """The lora_A / lora_B values of ``flat`` by adapted layer, A from a fresh build with the run's seed where
    the flat vector does not hold it (LoRA-FA)."""
    module = minilm(kind)
    frozen = {name: p.detach() for name, p in module.named_parameters() if "lora_A" in name}
    return {**frozen, **{n: t for n, t in pieces(flat, module).items() if "lora_" in n}}


def _layers(factors: dict[str, Tensor]) -> list[str]:
    return sorted({name.split(".lora_")[0] for name in factors})


def _update(factors: dict[str, Tensor], layer: str) -> Tensor:
    """A layer's full weight update ``B A`` (out x in); alpha / r scales every client alike."""
    return factors[f"{layer}.lora_B.default.weight"] @ factors[f"{layer}.lora_A.default.weight"]


@pytest.mark.slow
def test_one_fedavg_round_of_lora_fa_is_the_weighted_mean_of_the_clients_full_updates(tmp_path: Path) -> None:
    """Measured: the server's B A and the weighted mean of the clients' B_k A agree to 9.3e-8 relative (float32
    rounding; the worst of the 12 adapted layers), on updates that differ between clients by 1.9 times the
    mean's norm."""
    new, uploads = _round(tmp_path, "lora_fa")
    start = minilm("lora_fa")
    initial = torch.cat([p.detach().reshape(-1) for p in start.parameters() if p.requires_grad])
    w = torch.tensor(SIZES, dtype=torch.float64) / sum(SIZES)
    server = _factors(new, "lora_fa")
    clients = [_factors(initial + uploads[k], "lora_fa") for k in range(len(SIZES))]  # B_k = B_0 + its update
    worst, spread = 0.0, 0.0
    for layer in _layers(server):
        reference = sum(float(w[k]) * _update(clients[k], layer).double() for k in range(len(SIZES)))
        assert isinstance(reference, Tensor)
        got = _update(server, layer).double()
        worst = max(worst, float((got - reference).norm() / reference.norm()))
        spread = max(spread, float((_update(clients[0], layer) - _update(clients[2], layer)).norm() / reference.norm()))
    assert worst < 1e-6, worst
    assert spread > 0.1  # the clients trained apart: a mean of equal updates would hide a wrong weighting


@pytest.mark.slow
def test_plain_loras_mean_of_factors_is_not_the_mean_of_the_clients_updates(tmp_path: Path) -> None:
    """Plain LoRA averages A and B apart: the server's ``mean(B_k) mean(A_k)`` (checked to be what FedAvg
    gives) differs from ``mean(B_k A_k)``: measured 1.1% of the mean update on the worst of the 12 layers after
    this one round from B = 0 (A moves only once B has, so the gap grows with training), where LoRA-FA's agree
    to 9.3e-8."""
    new, uploads = _round(tmp_path, "lora")
    start = minilm("lora")
    initial = torch.cat([p.detach().reshape(-1) for p in start.parameters() if p.requires_grad])
    w = [n / sum(SIZES) for n in SIZES]
    server = _factors(new, "lora")
    clients = [_factors(initial + uploads[k], "lora") for k in range(len(SIZES))]
    worst = 0.0
    for layer in _layers(server):
        a, b = (f"{layer}.lora_{m}.default.weight" for m in "AB")
        mean_a = sum(w[k] * clients[k][a].double() for k in range(len(SIZES)))
        mean_b = sum(w[k] * clients[k][b].double() for k in range(len(SIZES)))
        assert isinstance(mean_a, Tensor) and isinstance(mean_b, Tensor)
        torch.testing.assert_close(_update(server, layer).double(), mean_b @ mean_a, rtol=1e-5, atol=1e-9)
        of_updates = sum(w[k] * _update(clients[k], layer).double() for k in range(len(SIZES)))
        assert isinstance(of_updates, Tensor)
        worst = max(worst, float((of_updates - mean_b @ mean_a).norm() / of_updates.norm()))
    assert worst > 3e-3, worst
