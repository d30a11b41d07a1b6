"""``model.adapter``: refusals from its declarations, a user's own kind beside the built-in ones, and what
LoRA-FA leaves to train on the packaged all-MiniLM-L6-v2."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from fedsim import Simulation
from fedsim.config import ConfigError, ModelConfig, parse_config
from fedsim.models import Replica, build_model
from tests.adapters.runs import LENGTH, LORA_FA_PARAMS, MINILM_PARAMS, RANK, minilm, trained_named
from tests.conftest import tiny_config


def _refused(model: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(tiny_config(model=model))
    return str(caught.value)


def test_an_adapter_on_a_model_it_does_not_adapt_is_refused_from_its_declaration() -> None:
    line = _refused({"kind": "mlp", "adapter": {"kind": "lora_fa"}})
    assert (
        "model.adapter.kind=lora_fa adapts model.kind hf_causal_lm, hf_sequence_classification, not model.kind=mlp"
        in line
    )
    line = _refused({"kind": "cnn", "adapter": {"factory": "tests.adapters.bitfit:bitfit"}})
    assert "model.adapter.kind=test_bitfit adapts model.kind logistic, mlp, not model.kind=cnn" in line


@pytest.mark.parametrize(
    ("adapter", "says"),
    [
        ({"kind": "lora", "r": 0}, "r"),
        ({"kind": "lora_fa", "alpha": math.nan}, "alpha"),
        ({"kind": "lora_fa", "alpha": math.inf}, "alpha"),
        ({"kind": "lora", "dropout": math.inf}, "dropout"),
        ({"kind": "lora", "dropout": 1.0}, "dropout"),
        ({"kind": "lora", "target_modules": []}, "target_modules"),
        ({"kind": "lora", "rank": 4}, "rank"),
        ({"kind": "dora"}, "none"),
    ],
)
def test_impossible_adapter_settings_are_one_line(adapter: dict[str, object], says: str) -> None:
    line = _refused({"kind": "hf_sequence_classification", "adapter": adapter})
    assert "model.adapter" in line and says in line and "\n" not in line.strip(), line


def test_your_own_adapter_kind_is_built_as_the_built_in_ones_are() -> None:
    """BitFit registered in the test's own module, named by YAML's factory: the replica lays only the biases flat."""
    cfg = parse_config(
        tiny_config(model={"kind": "mlp", "hidden": [16], "adapter": {"factory": "tests.adapters.bitfit:bitfit"}})
    )
    assert cfg.model.adapter.kind == "test_bitfit"
    replica = Replica(build_model(cfg.model, (64,), 10, seed=0))
    assert replica.n_params == 16 + 10  # the two layers' biases; the weights (64 x 16, 16 x 10) stay frozen
    assert sum(p.numel() for p in replica.module.parameters()) == 64 * 16 + 16 + 16 * 10 + 10


def test_a_module_of_your_own_handed_to_simulation_gets_the_configured_adapter(tmp_path: Path) -> None:
    tree = tiny_config(model={"kind": "mlp", "hidden": [16], "adapter": {"factory": "tests.adapters.bitfit:bitfit"}})
    module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    sim = Simulation(tree, model=module, out=tmp_path / "o", db=tmp_path / "r.db")
    assert sim.engine.executor.replica.n_params == 16 + 10  # the biases only, as the config's BitFit says


def test_target_modules_that_match_nothing_are_named_with_candidates() -> None:
    cfg = ModelConfig(kind="hf_sequence_classification", adapter={"kind": "lora", "target_modules": ["query", "qkv"]})
    with pytest.raises(
        ConfigError,
        match=r"^model.adapter.target_modules: qkv match no module of the model; its"
        r" linear layers include query, key, value, dense, classifier$",
    ):
        build_model(cfg, (LENGTH,), 2, seed=0)


def test_lora_fa_leaves_only_b_and_the_head_to_train_and_its_a_comes_from_the_seed() -> None:
    """On the 22.7M-parameter MiniLM, the replica's flat vector is the 12 B factors (384 x 8, query and value of 6
    layers) and the new 2-class head: 37,634 values, 0.17% of the model; every A is frozen at a kaiming-uniform
    init the run's seed draws, the same on every build with that seed (every client's replica, a resumed run's)."""
    model = minilm("lora_fa")
    replica = Replica(model)
    names = [name for name, _ in trained_named(model)]
    assert replica.n_params == LORA_FA_PARAMS == 37_634 and replica.n_buffers == 0
    assert sum(p.numel() for p in model.parameters()) > MINILM_PARAMS  # the base (and A, the head's copy) stay in
    assert len(names) == 14 and all("lora_B" in n for n in names[:12]) and all("classifier" in n for n in names[12:])
    a = {n: p for n, p in model.named_parameters() if "lora_A" in n}
    assert len(a) == 12 and not any(p.requires_grad for p in a.values())
    assert all(p.shape == (RANK, 384) and float(p.abs().max()) > 0 for p in a.values())
    assert float(replica.params[: 12 * 384 * RANK].abs().max()) == 0  # B starts at zero: the model is the base's
    again, other = minilm("lora_fa"), minilm("lora_fa", seed=1)
    again_a = {n: p for n, p in again.named_parameters() if "lora_A" in n}
    other_a = {n: p for n, p in other.named_parameters() if "lora_A" in n}
    assert all(torch.equal(a[n], again_a[n]) for n in a)
    assert not any(torch.equal(a[n], other_a[n]) for n in a)


def test_plain_lora_trains_a_too() -> None:
    replica = Replica(minilm("lora"))
    assert replica.n_params == LORA_FA_PARAMS + 12 * RANK * 384
