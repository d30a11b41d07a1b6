"""bench/vs_pfl.py's shapes: each user's window of the data, the next-word transformer's causality, and that
fedsim's language-model loss on it is the per-token cross-entropy pfl's side computes, checked by hand."""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import torch

from fedsim.tasks.language_model import LanguageModel
from tests.conftest import load_module

BENCH = Path(__file__).resolve().parents[2] / "bench"


def shapes() -> ModuleType:
    return load_module("pfl_shapes", BENCH / "pfl_shapes.py")


def test_cifar_users_hold_disjoint_consecutive_rows_and_femnist_windows_stay_inside_the_pool() -> None:
    s = shapes().SHAPES
    cifar = s["cifar10"]
    assert [cifar.user_rows(u) for u in (0, 1, 999)] == [(0, 50), (50, 100), (49_950, 50_000)]
    femnist = s["femnist"]
    assert femnist.distinct == 60_000
    for user in (0, 299, 300, 3399):
        start, stop = femnist.user_rows(user)
        assert stop - start == 200 and start >= 0 and stop <= 60_000
    # 3,400 users x 200 = 680,000 rows wrap around 59,801 window starts: user 299 ends at 60,000, user 300 wraps
    assert femnist.user_rows(299) == (59_800, 60_000) and femnist.user_rows(300) == (199, 399)
    # a round's steps: cohort x ceil(per_user / batch)
    assert cifar.steps_per_round() == 50 * 5 and femnist.steps_per_round() == 10 * 10
    assert s["stackoverflow"].steps_per_round() == 20 * 4


def test_parameter_counts_are_the_benchmarks() -> None:
    m = shapes()
    counts = {name: sum(p.numel() for p in m.MODELS[name](shape).parameters()) for name, shape in m.SHAPES.items()}
    # simple_cnn on 32x32x3: 3*3*3*32+32 + 3*3*32*64+64 + 14*14*64*128+128 + 128*10+10
    assert counts["cifar10"] == 896 + 18_496 + 1_605_760 + 1_290
    # on 28x28x1 with 62 outputs (FLUTE's card: 1,199,882 for 10): 320 + 18,496 + 12*12*64*128+128 + 128*62+62
    assert counts["femnist"] == 320 + 18_496 + 1_179_776 + 7_998
    # embeddings 10,004 x 96, and per layer attention 4 x (96*96+96), feed-forward 96*1536+1536 + 1536*96+96, 2 norms
    layer = 4 * (96 * 96 + 96) + (96 * 1536 + 1536) + (1536 * 96 + 96) + 2 * 2 * 96
    assert counts["stackoverflow"] == 10_004 * 96 + 3 * layer


def test_transformer_is_causal_and_fedsims_loss_is_the_mean_token_cross_entropy() -> None:
    m = shapes()
    shape = m.SHAPES["stackoverflow"]
    model = m.MODELS["stackoverflow"](shape).eval()
    x, y = m.synthetic(shape)
    tokens, targets = torch.from_numpy(x[:3]), torch.from_numpy(y[:3])
    assert tokens.min() >= 1 and torch.equal(tokens[:, 1:], targets[:, :-1])  # targets are the next tokens
    with torch.no_grad():
        logits = model(tokens)
        changed = tokens.clone()
        changed[:, 10] = (changed[:, 10] % (shape.classes - 1)) + 1 + (changed[:, 10] == shape.classes - 1).long()
        after = model(changed)
        from_floats = model(tokens.float())
    assert torch.allclose(logits[:, :10], after[:, :10], atol=1e-5)  # no position sees a later token
    assert not torch.allclose(logits[:, 10:], after[:, 10:], atol=1e-3)
    assert torch.equal(from_floats, logits)  # fedsim's float32 inputs give the same logits
    # by hand: -log softmax of the target at every token, averaged over all 3 x 20 tokens
    log_probs = logits - logits.logsumexp(-1, keepdim=True)
    by_hand = -log_probs.gather(-1, targets[..., None]).mean()
    task = LanguageModel()
    assert math.isclose(float(task.loss(logits, targets)), float(by_hand), rel_tol=1e-5)
