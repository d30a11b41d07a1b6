"""The SFT bottleneck split: exact at full rank with the residual kept, ONNX edge half equal to torch, r values
per token on the wire, and a cloud half that learns with the down-projection frozen and U_r trained."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from transformers import BertModel

from fedsim.comm.codecs import build_codec
from fedsim.config import ConfigError, validate
from fedsim.split.bottleneck import BottleneckTop, bottleneck_split, factor, wire_width
from fedsim.split.config import SplitConfig
from fedsim.split.model import SplitError, split_encoder
from fedsim.split.trainer import CloudTrainer
from fedsim.wire.batch import TokenBatch, encode_batch
from tests.split_fixtures import split_config

IDS = torch.tensor([[101, 2023, 3185, 2001, 2307, 999, 102, 0, 0], [101, 2919, 1998, 11771, 3185, 2146, 102, 0, 0]])
MASK = (IDS != 0).long()


def test_full_rank_with_the_residual_kept_is_the_unsplit_model(pretrained: BertModel) -> None:
    bottom, top = split_encoder(copy.deepcopy(pretrained), 3, num_labels=2)
    edge, cloud = bottleneck_split(copy.deepcopy(pretrained), 3, num_labels=2, rank=384, residual=True)
    cloud.classifier.load_state_dict(top.classifier.state_dict())
    bottom.eval(), top.eval(), edge.eval(), cloud.eval()
    with torch.no_grad():
        want, got = top(bottom(IDS, MASK), MASK), cloud(edge(IDS, MASK), MASK)
        hidden_want = top.encode(bottom(IDS, MASK), MASK)[MASK.bool()]
        hidden_got = cloud.encode(edge(IDS, MASK), MASK)[MASK.bool()]
    assert edge(IDS, MASK).shape == (2, 9, 384 + 384)  # the code and the attention output both cross
    torch.testing.assert_close(hidden_got, hidden_want, rtol=0, atol=1e-4)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


def test_the_factors_are_the_svd_truncation(pretrained: BertModel) -> None:
    weight = pretrained.encoder.layer[3].intermediate.dense.weight.detach()
    up, down = factor(weight, 8)
    assert up.shape == (1536, 8) and down.shape == (8, 384)
    s = torch.linalg.svdvals(weight.double())
    err = torch.linalg.matrix_norm((up @ down).double() - weight.double())
    assert float(err) == pytest.approx(float(s[8:].square().sum().sqrt()), rel=1e-4)  # Eckart-Young


def test_the_onnx_edge_half_matches_torch(pretrained: BertModel, tmp_path: Path) -> None:
    from edge.export import export_bottom

    edge, _ = bottleneck_split(copy.deepcopy(pretrained), 3, num_labels=2, rank=8, residual=False)
    diff = export_bottom(edge, tmp_path / "bottom.onnx")
    assert diff < 1e-4
    session = ort.InferenceSession(str(tmp_path / "bottom.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {"input_ids": IDS.numpy(), "attention_mask": MASK.numpy()})[0]
    with torch.no_grad():
        want = edge(IDS, MASK).numpy()
    assert got.shape == (2, 9, 8)  # r values per token: 384 / 8 = 48x fewer than the hidden state
    np.testing.assert_allclose(got[MASK.numpy().astype(bool)], want[MASK.numpy().astype(bool)], atol=1e-4)


def test_the_cloud_half_learns_through_a_rank_4_bottleneck(pretrained: BertModel) -> None:
    cfg = split_config(model={"split_layer": 4, "bottleneck": {"rank": 4}}, codec="int8")
    assert wire_width(cfg.model, 384) == 4
    trainer = CloudTrainer(cfg, copy.deepcopy(pretrained))
    assert isinstance(trainer.top, BottleneckTop) and trainer.wire_width == 4 and trainer.hidden_size == 384
    trained = {n for n, p in trainer.top.named_parameters() if p.requires_grad}
    assert {"up.weight", "up.bias", "classifier.weight"} <= trained
    assert not any(n.startswith("output.") for n in trained)  # layer k's output dense and LayerNorm stay frozen
    rng = np.random.default_rng(0)
    lengths = np.array([5, 3, 7, 2])
    tokens = rng.standard_normal((int(lengths.sum()), 4)).astype(np.float32)
    batch = encode_batch(build_codec("int8"), TokenBatch(tokens, lengths), np.arange(4) % 2)
    losses = [trainer.train_step(batch).loss for _ in range(8)]
    assert losses[-1] < 0.7 * losses[0]


def test_bad_bottlenecks_are_refused(pretrained: BertModel) -> None:
    with pytest.raises(SplitError, match=r"model.bottleneck.rank=400 is outside 1..384"):
        bottleneck_split(copy.deepcopy(pretrained), 3, num_labels=2, rank=400, residual=False)
    with pytest.raises(SplitError, match=r"model.split_layer=6: a bottleneck split goes inside a layer, 0..5"):
        bottleneck_split(copy.deepcopy(pretrained), 6, num_labels=2, rank=8, residual=False)
    with pytest.raises(ConfigError, match=r"model.bottleneck.rank: Input should be greater than or equal to 1"):
        validate(SplitConfig, {"model": {"bottleneck": {"rank": 0}}})


def test_a_bottleneck_run_reports_ratios_against_the_hidden_state(
    pretrained: BertModel, sst2_dir: Path, tmp_path: Path
) -> None:
    """fedsim split with an exported rank-4 bottom: the wire carries 4 values per token, the baseline is the
    384-wide padded fp32 hidden state, so fp32 codes alone are a ratio near 384 / 4 over the real tokens."""
    from edge.export import export_bottom
    from edge.onnx_bottom import EdgeEncoder
    from fedsim.split.model import minilm_path
    from fedsim.split.simulate import run_split

    cfg = split_config(
        name="sft",
        model={"split_layer": 4, "bottleneck": {"rank": 4}},
        data={"dir": str(sst2_dir), "clients": 2},
        train={"steps": 8, "batch_size": 10, "lr": 5e-3},
    )
    edge, _ = bottleneck_split(copy.deepcopy(pretrained), 4, num_labels=2, rank=4, residual=False)
    export_bottom(edge, tmp_path / "bottom.onnx")
    encoder = EdgeEncoder(tmp_path / "bottom.onnx", minilm_path(), max_length=16)
    tokens = encoder.encode(["a great film", "awful"])
    assert tokens.tokens.shape[1] == 4 and tokens.hidden == 384
    summary = run_split(
        cfg, tmp_path / "out", tmp_path / "runs.db", encoder, CloudTrainer(cfg, copy.deepcopy(pretrained))
    )
    assert summary["steps"] == 8
    # 96x per real token (384 / 4), more against the padded baseline, a little less for lengths and labels
    assert 90 < summary["compression_ratio"] < 200
