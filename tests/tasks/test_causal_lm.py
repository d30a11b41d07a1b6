"""Causal language modelling with ``model.kind: hf_causal_lm`` on tokenised text: the model, its padding, the
perplexity fedsim reports against one computed directly from transformers' logits, a round of
examples/peft_causal.yaml on SST-2, and the one-line refusals of a bad model."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer

from fedsim import Simulation
from fedsim.config import ConfigError, ModelConfig, Sst2Data, load_config
from fedsim.data import build_dataset
from fedsim.models import Replica, build_model
from fedsim.models.hf import default_path
from fedsim.tasks import LanguageModel, evaluate

ROOT = Path(__file__).resolve().parents[2]
SST2 = ROOT.parent / "shared" / "data" / "sst2"
EXAMPLE = ROOT / "examples" / "peft_causal.yaml"
TINY = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "n_positions": 16}
VOCAB = 30522  # all-MiniLM-L6-v2's tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return AutoTokenizer.from_pretrained(default_path(), local_files_only=True)


def _causal(**settings: Any) -> Any:
    return build_model(ModelConfig(kind="hf_causal_lm", config={**TINY, **settings}), (16,), VOCAB, seed=0)


def test_a_model_built_from_a_config_is_seeded_and_gives_next_token_logits_at_every_position() -> None:
    model = _causal()
    assert model.model.config.vocab_size == VOCAB and model.model.config.n_layer == 2  # vocab from the data
    ids = torch.randint(1, VOCAB, (3, 16)).float()
    assert model(ids).shape == (3, 16, VOCAB)
    again = _causal()
    assert all(a.equal(b) for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))
    other: Any = build_model(ModelConfig(kind="hf_causal_lm", config=TINY), (16,), VOCAB, seed=1)
    assert not other.model.transformer.wte.weight.equal(model.model.transformer.wte.weight)


@pytest.mark.parametrize("pad_token_id", [None, 0])
def test_right_padding_leaves_the_real_positions_logits_as_the_sentence_alone_gives(
    tokenizer: Any, pad_token_id: int | None
) -> None:
    """With a pad id in the config the mask is ``ids != pad``; without one there is no mask. Either way the
    logits of a sentence's real tokens equal those of the sentence run alone, unpadded, through transformers."""
    model = _causal(pad_token_id=pad_token_id).eval()
    assert model.pad_id == pad_token_id
    ids = tokenizer("a fine film")["input_ids"]
    padded = tokenizer("a fine film", padding="max_length", max_length=16)["input_ids"]
    with torch.no_grad():
        alone = model.model(input_ids=torch.tensor([ids])).logits[0]
        ours = model(torch.tensor([padded], dtype=torch.float32))[0, : len(ids)]
    torch.testing.assert_close(ours, alone, rtol=1e-5, atol=1e-5)


def test_perplexity_is_exp_of_the_mean_loss_over_the_real_next_tokens(sst2_dir: Path, tokenizer: Any) -> None:
    """The reference tokenises each test sentence alone (no padding), runs transformers' model on it, and takes
    F.cross_entropy of the logits at positions 0..n-2 against tokens 1..n-1, summed over sentences and divided
    by their count of predicted tokens: perplexity = exp(that mean), as the task defines it."""
    data = build_dataset(Sst2Data(dataset="sst2", dir=sst2_dir, clients=2, max_length=16, target="next_token"), 0)
    model = _causal()
    replica = Replica(model)
    result = evaluate(replica, replica.flat.clone(), data.test, 3, LanguageModel())
    total, count = 0.0, 0
    model.eval()  # GPT-2's dropout off, as evaluation has it
    with torch.no_grad():
        for line in (sst2_dir / "test.tsv").read_text().splitlines()[1:]:
            ids = torch.tensor(tokenizer(line.split("\t")[0], truncation=True, max_length=16)["input_ids"])
            logits = model.model(input_ids=ids[None]).logits[0]
            total += F.cross_entropy(logits[:-1], ids[1:], reduction="sum").item()
            count += len(ids) - 1
    assert result.samples == count  # a unit is a predicted token, padding and the end left out
    assert result.value == pytest.approx(math.exp(total / count), rel=1e-5)
    assert result.metric == "perplexity" and 0.8 * VOCAB < result.value < 1.2 * VOCAB  # untrained: about V


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"path": "nowhere"}, r"^model.path: no causal language model at nowhere \(not a directory\)$"),
        ({"config": {**TINY, "vocab_size": 1000}}, r"vocab_size is 1000, smaller than the data's 30522 token ids"),
        ({"config": {**TINY, "n_layers": 3}}, r"^model.config: gpt2 has no setting 'n_layers' \(did you mean n_layer"),
        ({"config": {**TINY, "model_type": "gpt3"}}, r"^model.config.model_type 'gpt3' is not a transformers model"),
        ({"config": {"n_layer": 2}}, r"^model.config needs model_type"),
        ({"config": {**TINY, "n_head": 5}}, r"^model.config: transformers cannot build it \(.*divisible"),
    ],
)
def test_a_model_that_cannot_be_built_is_one_line(model: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message) as raised:
        build_model(ModelConfig(kind="hf_causal_lm", **model), (16,), VOCAB, seed=0)
    assert "\n" not in str(raised.value)


def test_a_pretrained_model_read_from_a_directory_keeps_its_weights(tmp_path: Path) -> None:
    made = _causal()
    made.model.save_pretrained(tmp_path / "tiny")
    read: Any = build_model(ModelConfig(kind="hf_causal_lm", path=str(tmp_path / "tiny")), (16,), VOCAB, seed=7)
    assert read.model.transformer.wte.weight.equal(made.model.transformer.wte.weight)
    with pytest.raises(ConfigError, match=r"model.path's vocab_size \(.*tiny\) is 30522, smaller than the data's"):
        build_model(ModelConfig(kind="hf_causal_lm", path=str(tmp_path / "tiny")), (16,), VOCAB + 1, seed=0)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"^model.path: no causal language model at .*empty \(") as raised:
        build_model(ModelConfig(kind="hf_causal_lm", path=str(tmp_path / "empty")), (16,), VOCAB, seed=0)
    assert "\n" not in str(raised.value)


@pytest.mark.slow
@pytest.mark.skipif(not (SST2 / "train.tsv").is_file(), reason="needs ../shared/data/sst2")
def test_a_round_of_the_causal_example_brings_perplexity_well_below_the_vocabulary(tmp_path: Path) -> None:
    """An untrained model's perplexity is about the vocabulary's size (uniform next-token guesses); one round of
    the example's FedAvg lowers it, on GLUE's dev set and on the clients' held-out sentences."""
    cfg = load_config(EXAMPLE, [f"data.dir={SST2}"])
    data = build_dataset(cfg.data, cfg.seed)
    replica = Replica(build_model(cfg.model, data.input_shape, data.num_classes, cfg.seed))
    untrained = evaluate(replica, replica.flat.clone(), data.test, 64, LanguageModel()).value
    assert 0.9 * VOCAB < untrained < 1.1 * VOCAB
    sim = Simulation(EXAMPLE, overrides=["rounds=1", f"data.dir={SST2}"], out=tmp_path / "o", db=tmp_path / "r.db")
    summary = sim.run()
    trained = summary.final_metrics["perplexity"]
    assert math.isfinite(trained) and trained < 0.8 * untrained, (untrained, trained)
    assert float(summary.federated_eval["mean"]) < 0.8 * untrained
