"""examples/peft_sst2.yaml, cut to one round on a few of SST-2's sentences, runs with the sequential and with the
fused executor: each client's upload is the adapter and the head (B of every query and value projection, the new
head: 37,634 floats), under 5% of the dense model's bytes (22.7 M floats: 150,540 of 90,855,944 bytes, 0.17%).
Skips without ../shared/data/sst2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedsim import Simulation
from fedsim.config import load_config
from tests.adapters.runs import LORA_FA_PARAMS, MINILM_PARAMS

ROOT = Path(__file__).resolve().parents[2]
SST2 = ROOT.parent / "shared" / "data" / "sst2"
FLOAT32 = 4


@pytest.mark.slow
@pytest.mark.skipif(not (SST2 / "train.tsv").is_file(), reason="needs ../shared/data/sst2")
@pytest.mark.parametrize("executor", ["sequential", "fused"])
def test_the_sst2_adapter_example_runs_a_round_and_uploads_the_adapter_only(tmp_path: Path, executor: str) -> None:
    overrides = ["rounds=1", "data.limit=400", "data.max_length=16", f"executor.kind={executor}", f"data.dir={SST2}"]
    cfg = load_config(ROOT / "examples" / "peft_sst2.yaml", overrides)
    summary = Simulation(cfg, out=tmp_path / "o", db=tmp_path / "r.db").run()
    fields = json.loads((tmp_path / "o" / "summary.json").read_text())
    per_client = fields["bytes_up"] / cfg.clients_per_round  # every one of the 10 reported
    assert LORA_FA_PARAMS * FLOAT32 <= per_client <= LORA_FA_PARAMS * FLOAT32 + 16  # B and the head, float32
    assert per_client < 0.05 * MINILM_PARAMS * FLOAT32
    assert (tmp_path / "o" / "adapter" / "adapter_model.safetensors").is_file()
    assert 0.0 < summary.final_accuracy <= 1.0
