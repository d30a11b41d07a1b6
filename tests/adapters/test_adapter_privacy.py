"""Central DP on a LoRA-FA run clips and noises the adapter's update only: checked against plain torch on the
clients' own uploads (DP-FedAvg, McMahan et al., ICLR 2018, Algorithm 1: each update scaled by
``min(1, C / ||Delta_k||)``, the sum plus ``N(0, (z C)^2 I)``, over the fixed cohort ``K``), and the noise's
spread against the chi-square law of a Gaussian on the adapter's 37,634 coordinates."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from scipy import stats
from torch import Tensor

from fedsim import Simulation
from tests.adapters.runs import LORA_FA_PARAMS, adapter_tree, final_flat, minilm, record_rows, token_data

SIZES = [4, 8]
CLIP, Z = 1e-3, 1.0


def _run(tmp_path: Path, name: str, **privacy: Any) -> Tensor:
    tree = adapter_tree("lora_fa", len(SIZES))
    if privacy:
        tree["privacy"] = {"kind": "central", "delta": 1e-5, **privacy}
    else:
        tree["server_stages"] = [record_rows(tmp_path / "rows.safetensors")]  # each client's upload, un-noised
    Simulation(tree, data=token_data(SIZES), out=tmp_path / name, db=tmp_path / "runs.db").run()
    return final_flat(tmp_path / name)


@pytest.mark.slow
def test_central_dp_clips_and_noises_the_adapter_update_only(tmp_path: Path) -> None:
    """Without noise, the new global model is the initial one plus the clients' clipped uploads over the cohort
    (to the float32 rounding of reading it back: 1e-4 of its norm), a vector of the adapter's length whose norm
    is at most C. With noise multiplier z, the
    difference from that run is the noise over the cohort: std z C / K on each of the 37,634 coordinates, its
    sum of squares inside the chi-square law's 1e-6 tails (measured: its z-score 0.75)."""
    _run(tmp_path, "plain")
    uploads = [t for _, t in sorted(load_file(tmp_path / "rows.safetensors").items(), key=lambda kv: int(kv[0]))]
    initial = torch.cat([p.detach().reshape(-1) for p in minilm("lora_fa").parameters() if p.requires_grad])
    clipped = [u * min(1.0, CLIP / float(u.norm())) for u in uploads]
    assert all(float(u.norm()) > 10 * CLIP for u in uploads)  # every client is clipped: the clip is seen
    quiet = _run(tmp_path, "clipped", clip=CLIP, noise_multiplier=0.0)
    assert quiet.numel() == initial.numel() == LORA_FA_PARAMS
    step = quiet - initial
    reference = sum(clipped) / len(SIZES)
    assert isinstance(reference, Tensor)
    # the step is read back as a difference of float32 weights (the head's are near 0.05, an ulp 3.7e-9 apart)
    assert float((step - reference).norm() / reference.norm()) < 1e-4
    assert float(step.norm()) <= CLIP * (1 + 1e-6)

    noisy = _run(tmp_path, "noised", clip=CLIP, noise_multiplier=Z)
    noise = (noisy - quiet).double()
    sigma = Z * CLIP / len(SIZES)
    n = noise.numel()
    statistic = float((noise / sigma).square().sum())
    assert stats.chi2.ppf(1e-6, n) < statistic < stats.chi2.ppf(1 - 1e-6, n), (statistic, n)
    assert abs(float(noise.mean())) < 5 * sigma / n**0.5
