"""The attacks that break the robust rules: min-max and min-sum (Shejwalkar & Houmansadr) and Fang et al.'s
full-knowledge attacks on trimmed mean and on Krum, each against a direct numpy implementation of its paper's
definition on fixed inputs; run on one and two ranks alike."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedsim.config import ConfigError, parse_config
from fedsim.data.base import ArrayDataset, ClientData
from fedsim.robust import HonestUpdates, build_attack
from fedsim.robust.attack import AttackContext
from fedsim.robust.attacks.fang import FangKrum, FangKrumConfig, FangTrim, FangTrimConfig, fang_trim_rows
from fedsim.robust.attacks.min_max import MinMax, MinMaxConfig, MinSum, MinSumConfig
from tests.conftest import on_one_and_two_ranks, tiny_config

MLP = {"kind": "mlp", "hidden": [16]}
CONTEXT = AttackContext(seed=3, population=40, numel=5, device=torch.device("cpu"))


def _honest(rows: np.ndarray, attackers: int = 2) -> HonestUpdates:
    x = torch.from_numpy(rows)
    moments = torch.cat([x.sum(0), (x * x).sum(0), torch.tensor([float(len(x))], dtype=torch.float64)])
    return HonestUpdates(moments, x.float(), len(x) + attackers, attackers)


@pytest.mark.parametrize("perturbation", ["unit", "std", "sign"])
def test_min_max_and_min_sum_go_as_far_as_the_papers_conditions_allow(perturbation: str) -> None:
    """gamma against the closed form of each condition: min-max's is the least positive root over i of
    ||d_i + gamma p||^2 = D^2 (d_i = mean - g_i, D the largest honest distance); min-sum's, as the d_i sum to 0,
    gamma = sqrt((S - sum_i ||d_i||^2) / (n ||p||^2)), S the largest honest sum of squared distances."""
    rows = np.random.default_rng(3).normal(size=(7, 5))
    mean = rows.mean(0)
    p = {"unit": -mean / np.linalg.norm(mean), "std": -rows.std(0, ddof=1), "sign": -np.sign(mean)}[perturbation]
    pairwise = np.array([[np.sum((a - b) ** 2) for b in rows] for a in rows])
    d = mean - rows
    pp = float(p @ p)
    roots = [(-(di @ p) + np.sqrt((di @ p) ** 2 - pp * (di @ di - pairwise.max()))) / pp for di in d]
    expected = {"min_max": min(roots), "min_sum": np.sqrt((pairwise.sum(1).max() - np.sum(d * d)) / (len(rows) * pp))}
    for kind, cls, cfg_cls in (("min_max", MinMax, MinMaxConfig), ("min_sum", MinSum, MinSumConfig)):
        attack = cls(cfg_cls(fraction=0.2, perturbation=perturbation, gamma_init=2.0, tolerance=1e-7), CONTEXT)
        sent = attack.craft(_honest(rows)).double().numpy()
        gamma = float(np.linalg.norm(sent - mean) / np.sqrt(pp))
        assert 0 < expected[kind] < 4.0  # within the search's reach, 2 gamma_init
        assert gamma == pytest.approx(expected[kind], abs=1e-5), kind
        np.testing.assert_allclose(sent, mean + gamma * p, rtol=1e-5, atol=1e-6)


def np_fang_trim(honest: np.ndarray, uniform: np.ndarray, b: float) -> np.ndarray:
    """Fang et al.'s full-knowledge attack on trimmed mean, coordinate by coordinate as the paper writes it (its
    intervals as sets: ``[w_max / b, w_max]`` for a negative ``w_max`` is the values from ``w_max`` up to
    ``w_max / b``), each value at the point ``u`` of its interval from the lower end."""
    c, d = uniform.shape
    s = np.sign(honest.mean(0))
    w_max, w_min = honest.max(0), honest.min(0)
    out = np.zeros((c, d))
    for j in range(d):
        for k in range(c):
            if s[j] < 0:  # the parameter would decrease: values above the honest maximum
                lo, hi = sorted((w_max[j], b * w_max[j]) if w_max[j] > 0 else (w_max[j] / b, w_max[j]))
                out[k, j] = lo + (hi - lo) * uniform[k, j]
            elif s[j] > 0:  # values below the honest minimum
                lo, hi = sorted((w_min[j] / b, w_min[j]) if w_min[j] > 0 else (b * w_min[j], w_min[j]))
                out[k, j] = lo + (hi - lo) * uniform[k, j]
    return out


def test_fang_trim_is_the_papers_sampling_beyond_the_honest_extremes() -> None:
    rng = np.random.default_rng(5)
    honest = rng.normal(size=(9, 12))
    honest[:, 0] = [0.5, 1, 2, 3, 1, 1, 1, 1, 1]  # all positive: s > 0, w_min > 0 -> [w_min / 2, w_min]
    honest[:, 1] = -honest[:, 0]  # all negative: s < 0, w_max < 0 -> [w_max / 2, w_max]
    uniform = rng.random(size=(3, 12))
    got = fang_trim_rows(torch.from_numpy(honest), torch.from_numpy(uniform), 2.0).numpy()
    expected = np_fang_trim(honest, uniform, 2.0)  # each value at the same point u of its interval
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert ((got[:, 0] >= 0.25) & (got[:, 0] <= 0.5)).all() and ((got[:, 1] >= -0.5) & (got[:, 1] <= -0.25)).all()


def test_fang_trim_draws_each_attackers_own_values_from_its_own_stream() -> None:
    attack = FangTrim(FangTrimConfig(fraction=0.2), CONTEXT)
    honest = _honest(np.random.default_rng(1).normal(size=(6, 5)))
    both = attack.craft_each(honest, [4, 9], 2)
    alone = attack.craft_each(honest, [9], 2)
    assert not torch.equal(both[0], both[1])
    torch.testing.assert_close(alone[0], both[1], rtol=0, atol=0)  # the same client draws the same on any rank
    assert not torch.equal(attack.craft_each(honest, [9], 3)[0], alone[0])  # and anew each round


def np_krum_choice(x: np.ndarray, f: int) -> int:
    n = len(x)
    scores = [sum(sorted(np.sum((x[i] - x[j]) ** 2) for j in range(n) if j != i)[: n - f - 2]) for i in range(n)]
    return int(np.argmin(scores))


def np_fang_krum(honest: np.ndarray, c: int, threshold: float = 1e-5) -> tuple[float, np.ndarray]:
    """The paper's bound on lambda and its halving search, in update space (w_Re at the origin)."""
    n, d = honest.shape
    m = n + c
    dist = np.array([[np.linalg.norm(a - b) for b in honest] for a in honest])
    sums = [sum(sorted(dist[i, j] for j in range(n) if j != i)[: m - c - 2]) for i in range(n)]
    lam = min(sums) / ((m - 2 * c - 1) * np.sqrt(d)) + max(np.linalg.norm(g) for g in honest) / np.sqrt(d)
    s = np.sign(honest.mean(0))
    while lam >= threshold:
        crafted = -lam * s
        if np_krum_choice(np.vstack([honest, np.tile(crafted, (c, 1))]), c) >= n:
            break
        lam /= 2
    return lam, -lam * s


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fang_krum_is_the_papers_bound_and_search_and_krum_picks_it(seed: int) -> None:
    rng = np.random.default_rng(seed)
    honest = rng.normal(0.3, 1.0, size=(11, 8))
    c = 3
    lam, expected = np_fang_krum(honest, c)
    got = FangKrum(FangKrumConfig(fraction=0.2), CONTEXT).craft(_honest(honest, attackers=c)).double().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    assert lam > 1e-5 and np_krum_choice(np.vstack([honest, np.tile(got, (c, 1))]), c) >= len(honest)


def test_fang_krum_says_once_when_half_the_round_is_malicious(capsys: pytest.CaptureFixture[str]) -> None:
    """m - 2c - 1 < 1 (6 honest, 5 attackers): the bound divides by 1, and the run says so once."""
    honest = np.random.default_rng(0).normal(0.3, 1.0, size=(6, 8))
    attack = FangKrum(FangKrumConfig(fraction=0.4), replace(CONTEXT, announce=True))
    for _ in range(2):
        attack.craft(_honest(honest, attackers=5))
    err = capsys.readouterr().err
    assert err.count("m - 2c - 1 = 0") == 1, err
    attack.craft(_honest(honest, attackers=2))  # 8 - 4 - 1 = 3: nothing to say
    assert capsys.readouterr().err == ""


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["fang_trim", "fang_krum", "min_max"])
def test_the_strong_attacks_write_the_same_run_on_one_and_two_ranks(kind: str, tmp_path: Path) -> None:
    rule: dict[str, Any] = {"kind": "krum", "byzantine": 2} if kind == "fang_krum" else {"kind": "median"}
    tree = tiny_config(
        model=MLP, clients_per_round=8, data__clients=16, attack={"kind": kind, "fraction": 0.25}, aggregator=rule
    )
    one, two = on_one_and_two_ranks(tree, tmp_path)
    torch.testing.assert_close(two, one, rtol=0, atol=2e-5)


@pytest.mark.parametrize("shape", [(60,), (3, 4), (1, 5, 8)])
def test_a_backdoor_is_refused_on_inputs_its_trigger_does_not_fit(shape: tuple[int, ...], tmp_path: Path) -> None:
    """A flat vector has no corner to stamp; a 3x4 array (or 5 rows) would be mostly trigger: one line each."""
    x = np.zeros((8, *shape), dtype=np.float32)
    y = np.arange(8) % 2
    test = ClientData(torch.zeros(2, *shape), torch.zeros(2, dtype=torch.long))
    dataset = ArrayDataset(x, y, [np.arange(4), np.arange(4, 8)], test, num_classes=2)
    cfg = parse_config(tiny_config(data__clients=2, clients_per_round=2, attack={"kind": "backdoor", "fraction": 0.5}))
    with pytest.raises(ConfigError) as error:
        build_attack(cfg.attack, cfg.seed, dataset, 10, torch.device("cpu"), tmp_path / "h")
    message = str(error.value)
    expected = "stamps a 3x3 pixel trigger into images of height and width 6 or more; this dataset's inputs have shape"
    assert f"{expected} {shape}" in message
    assert "\n" not in message
    images = ArrayDataset(np.zeros((8, 1, 6, 6), np.float32), y, [np.arange(4), np.arange(4, 8)], test, 2)
    assert build_attack(cfg.attack, cfg.seed, images, 10, torch.device("cpu"), tmp_path / "h") is not None
    assert math.isfinite(cfg.attack.fraction)
