"""What a LoRA-FA run of the packaged MiniLM sends and stores: the adapter and the head, never the frozen base;
killed and resumed it ends on the uninterrupted run's weights; its adapter, exported in peft's format, is the
run's model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fedsim import Simulation, load_model
from fedsim.api.launch import build_engine
from fedsim.config import parse_config
from tests.adapters.runs import LENGTH, LORA_FA_PARAMS, MINILM_PARAMS, adapter_tree, final_flat, minilm, token_data

SIZES = [4, 8]
FLOAT32 = 4


def _tree() -> dict[str, object]:
    """SCAFFOLD keeps each client's control variate, one value a trained parameter, as its state."""
    return adapter_tree(
        "lora_fa",
        len(SIZES),
        rounds=2,
        algorithm={"kind": "scaffold", "lr": 0.5, "batch_size": 4},
        state={"backend": "disk"},
        checkpoint={"every": 1},
    )


def _stored(directory: Path) -> dict[str, torch.Tensor]:
    """Every float tensor of every safetensors file under ``directory`` except the exported adapter, by file
    and key."""
    found = {}
    for path in sorted(directory.rglob("*.safetensors")):
        if "adapter" not in path.parts:
            for key, tensor in load_file(path).items():
                if tensor.is_floating_point():
                    found[f"{path.relative_to(directory)}:{key}"] = tensor
    return found


def _base_in(stored: dict[str, torch.Tensor], model: torch.nn.Module) -> list[str]:
    """The frozen base weights any stored tensor holds: a base tensor's first 64 values found, in order, in
    a stored tensor (the model's layout) or as a set anywhere in all of them."""
    everything = torch.cat([t.reshape(-1) for t in stored.values()])
    held = []
    for name, p in model.named_parameters():
        if p.requires_grad or "lora_A" in name or "original_module" in name:
            continue  # trained, or drawn from the seed (A, the head's copy): not the pretrained base
        probe = p.detach().reshape(-1)[:64]
        probe = probe[(probe != 0) & (probe.abs() != 1)]  # values any tensor could hold by chance
        if bool(torch.isin(probe, everything).float().mean() > 0.5):
            held.append(name)
    return held


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")  # peft reads it
def test_a_lora_fa_run_sends_and_stores_the_adapter_only_and_resumes_bit_identical(tmp_path: Path) -> None:
    """Against the dense model's 22.7M floats (90.9 MB a client a round): each client sends twice 37,634 floats
    (SCAFFOLD's update and variate: 0.33%); the state files (SCAFFOLD's control variates), the checkpoint
    (global model, server variate, client states) and the saved model hold 37,634 floats each, and none holds
    the base's values. A run stopped after round 0 and
    resumed from its checkpoint ends bit-identical to the uninterrupted one (the frozen A rebuilt from the
    seed), and its exported peft adapter on a fresh AutoModelForSequenceClassification gives its logits."""
    data = token_data(SIZES)
    whole = Simulation(_tree(), data=data, out=tmp_path / "whole", db=tmp_path / "runs.db")
    whole.run()
    summary = json.loads((tmp_path / "whole" / "summary.json").read_text())
    per_client_round = summary["bytes_up"] / (2 * len(SIZES))
    assert per_client_round < 0.05 * MINILM_PARAMS * FLOAT32  # the bound; measured 0.33%
    # SCAFFOLD sends its update and its control variate's change: twice the adapter and head (and a few floats)
    assert per_client_round == pytest.approx(2 * LORA_FA_PARAMS * FLOAT32, abs=16)

    states = _stored(tmp_path / "whole" / "state")
    assert len(states) == len(SIZES) and all(t.numel() == LORA_FA_PARAMS for t in states.values()), {
        k: t.numel() for k, t in states.items()
    }
    assert final_flat(tmp_path / "whole").numel() == LORA_FA_PARAMS

    cut = Simulation(_tree(), data=data, out=tmp_path / "cut", db=tmp_path / "runs.db")
    cut.engine.run(after_round=lambda row: row.round == 0)
    kept = _stored(tmp_path / "cut" / "checkpoints")
    # the global model, the server's control variate, each client's: every one the adapter and head's size
    assert sorted(t.numel() for t in kept.values()) == [LORA_FA_PARAMS] * (2 + len(SIZES)), list(kept)
    everything = {**kept, **_stored(tmp_path / "cut" / "state"), **_stored(tmp_path / "whole")}
    assert {t.numel() for t in everything.values()} == {LORA_FA_PARAMS}  # 13 tensors, none of the base's size
    initial = minilm("lora_fa")
    assert _base_in(everything, initial) == []
    query = "model.base_model.model.bert.encoder.layer.0.attention.self.query.base_layer.weight"
    assert _base_in({"base": initial.get_parameter(query)}, initial) == [query]  # the probe finds a base weight

    cfg = parse_config(json.loads((tmp_path / "cut" / "config.json").read_text()))
    build_engine(cfg, tmp_path / "cut", tmp_path / "runs.db", resume=True, dataset=data).run()
    assert torch.equal(final_flat(tmp_path / "cut"), final_flat(tmp_path / "whole"))

    _exported_adapter_is_the_run_model(tmp_path / "whole", initial)


def _exported_adapter_is_the_run_model(out: Path, initial: torch.nn.Module) -> None:
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    from fedsim.models.hf import default_path

    files = sorted(p.name for p in (out / "adapter").iterdir())
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(files)
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 8 and config["lora_alpha"] == 16 and config["task_type"] == "SEQ_CLS"
    assert sorted(config["target_modules"]) == ["query", "value"]
    base = AutoModelForSequenceClassification.from_pretrained(default_path(), num_labels=2, local_files_only=True)
    peft = PeftModel.from_pretrained(base, out / "adapter").eval()
    ids = token_data([4]).test.x[:4].long()
    assert ids.shape == (4, LENGTH)
    with torch.no_grad():
        before = initial(ids.float())
        mine = load_model(initial, out)(ids.float())
        theirs = peft(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    assert float((mine - before).abs().max()) > 1e-3  # training moved the model: the comparison can see it
    torch.testing.assert_close(theirs, mine, rtol=0, atol=1e-6)
