"""The cloud trainer: learns from valid batches, refuses each malformed one untouched, checkpoints atomically."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BertModel

from fedsim.comm.codecs import build_codec
from fedsim.config import ConfigError
from fedsim.split.trainer import CloudTrainer
from fedsim.wire.batch import BatchError, TokenBatch, WireBatch, encode_batch
from tests.split_fixtures import split_config

HIDDEN = 384


def make_batch(codec: str = "fp32", lengths: tuple[int, ...] = (5, 3, 7, 2), seed: int = 0) -> WireBatch:
    rng = np.random.default_rng(seed)
    tokens = rng.standard_normal((sum(lengths), HIDDEN)).astype(np.float32)
    labels = np.arange(len(lengths)) % 2
    return encode_batch(build_codec(codec), TokenBatch(tokens, np.asarray(lengths)), labels)


def snapshot(trainer: CloudTrainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.top.state_dict().items()}


def assert_unchanged(trainer: CloudTrainer, before: dict[str, torch.Tensor]) -> None:
    after = trainer.top.state_dict()
    changed = [k for k, v in before.items() if not torch.equal(v, after[k])]
    assert changed == []


@pytest.mark.parametrize("codec", ["fp32", "fp16", "int8", "lowrank-int8:2", "lowrank-int4:4", "tucker:4,32"])
def test_loss_goes_down_on_a_repeated_batch(encoder: BertModel, codec: str) -> None:
    trainer = CloudTrainer(split_config(codec=codec), encoder)
    batch = make_batch(codec)
    losses = [trainer.train_step(batch).loss for _ in range(8)]
    assert losses[-1] < losses[0] * 0.7
    assert trainer.step == 8 and trainer.examples == 32
    assert trainer.peak_activation_mb > 0


def test_training_repeats_for_a_seed_whatever_else_draws_random_numbers(pretrained: BertModel) -> None:
    import copy

    def losses(seed: int, noise: int) -> list[float]:
        trainer = CloudTrainer(split_config(seed=seed), copy.deepcopy(pretrained))
        torch.manual_seed(noise)  # the global stream: other code in the process draws from it
        out = []
        for k in range(4):
            torch.rand(noise + k)
            out.append(trainer.train_step(make_batch(seed=k)).loss)
        return out

    assert losses(0, noise=1) == losses(0, noise=2)  # dropout draws from the trainer's own stream
    assert losses(0, noise=1) != losses(1, noise=1)  # which the seed sets


def _bad(batch: WireBatch, name: str) -> WireBatch:
    replace = dataclasses.replace
    if name == "unknown codec":
        return replace(batch, codec="zstd")
    if name == "shape":
        return replace(batch, shape=(batch.shape[0] + 1, HIDDEN))
    if name == "hidden size":
        return replace(batch, shape=(batch.shape[0], HIDDEN // 2))
    if name == "dtype":
        return replace(batch, dtype="float16")
    if name == "payload size":
        return replace(batch, payload=batch.payload[:-4])
    if name == "non-finite":
        values = np.frombuffer(batch.payload, dtype=np.float32).copy()
        values[7] = np.nan
        return replace(batch, payload=values.tobytes())
    if name == "label out of range":
        return replace(batch, labels=np.array([0, 1, 2, 0]))
    if name == "negative label":
        return replace(batch, labels=np.array([0, -1, 1, 0]))
    if name == "label count":
        return replace(batch, labels=batch.labels[:3])
    if name == "length zero":
        return replace(batch, lengths=np.array([5, 3, 0, 9]))
    if name == "too long":
        return replace(batch, lengths=np.array([5, 3, 7, 200]), shape=(215, HIDDEN))
    if name == "empty":
        return replace(batch, lengths=np.zeros(0, np.int64), labels=np.zeros(0, np.int64), shape=(0, HIDDEN))
    raise AssertionError(name)


MALFORMED = {
    "unknown codec": "unknown codec",
    "shape": "does not match",
    "hidden size": "does not match",
    "dtype": "dtype",
    "payload size": "payload",
    "non-finite": "non-finite",
    "label out of range": "labels must be in 0..1",
    "negative label": "labels must be in 0..1",
    "label count": "3 labels for 4 sentences",
    "length zero": "lengths must be in 1..16",
    "too long": "lengths must be in 1..16",
    "empty": "0 sentences",
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_each_malformed_batch_is_refused_and_changes_nothing(encoder: BertModel, name: str) -> None:
    trainer = CloudTrainer(split_config(), encoder)
    trainer.train_step(make_batch())  # B is no longer zero, the optimiser has state
    before = snapshot(trainer)
    with pytest.raises(BatchError, match=MALFORMED[name]):
        trainer.train_step(_bad(make_batch(seed=1), name))
    with pytest.raises(BatchError):
        trainer.evaluate(_bad(make_batch(seed=1), name))
    assert_unchanged(trainer, before)
    assert trainer.step == 1
    assert trainer.train_step(make_batch(seed=2)).step == 2  # and it keeps serving


def test_evaluate_counts_and_does_not_train(encoder: BertModel) -> None:
    trainer = CloudTrainer(split_config(), encoder)
    before = snapshot(trainer)
    result = trainer.evaluate(make_batch()) + trainer.evaluate(make_batch(seed=3))
    assert result.examples == 8 and 0 <= result.correct <= 8
    assert result.accuracy == result.correct / 8
    assert result.loss > 0
    assert_unchanged(trainer, before)


@pytest.mark.parametrize("mode", ["lora_fa", "full"])
def test_save_then_load_restores_the_top(encoder: BertModel, pretrained: BertModel, tmp_path: Path, mode: str) -> None:
    import copy

    cfg = split_config(adapter={"mode": mode})
    trainer = CloudTrainer(cfg, encoder)
    for seed in range(3):
        trainer.train_step(make_batch(seed=seed))
    trainer.save(tmp_path)
    trainer.train_step(make_batch(seed=9))
    final = trainer.save(tmp_path)  # the second save swaps the directory
    assert (final / "adapter_config.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapters"]

    fresh = CloudTrainer(cfg, copy.deepcopy(pretrained))
    probe = make_batch(seed=5)
    assert fresh.evaluate(probe).loss_sum != pytest.approx(trainer.evaluate(probe).loss_sum)
    fresh.load(tmp_path)
    assert fresh.evaluate(probe).loss_sum == pytest.approx(trainer.evaluate(probe).loss_sum, rel=1e-6)


def test_the_accelerator_setting_places_the_top_or_says_why_it_cannot(encoder: BertModel) -> None:
    trainer = CloudTrainer(split_config(accelerator="auto"), encoder)
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert {p.device.type for p in trainer.top.parameters()} == {want}
    assert trainer.train_step(make_batch()).step == 1
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match=r"accelerator=cuda, but torch .* sees no CUDA device"):
            CloudTrainer(split_config(accelerator="cuda"), encoder)
