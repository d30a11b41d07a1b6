"""Shejwalkar and Houmansadr's aggregation-tailored attacks and their DnC defence (NDSS 2021) against direct
numpy implementations on fixed inputs: the attacks' searches as the authors' notebooks write them (each rule
as the server runs it: fedsim's trim, the median of the middle pair, Krum's score over n - f - 2 neighbours,
multi-Krum's n - f best, Bulyan's n - 2f successive Krum picks), DnC as the paper's Algorithm 2 with numpy's
SVD; and in runs: the tailored attack beats the rule it names more than min-max does, DnC keeps most of the
accuracy."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedsim.config import parse_config
from fedsim.robust.aggregation import ServerView
from fedsim.robust.attack import HonestUpdates
from fedsim.robust.attacks.tailored import Tailored, TailoredConfig
from fedsim.robust.dnc import DnC, DnCConfig, dnc_coordinates, dnc_kept
from fedsim.robust.gather import GatheredRows
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config
from tests.robust.test_strong_attacks import CONTEXT


def _honest(rows: np.ndarray, attackers: int) -> HonestUpdates:
    x = torch.from_numpy(rows)
    moments = torch.cat([x.sum(0), (x * x).sum(0), torch.tensor([float(len(x))], dtype=torch.float64)])
    return HonestUpdates(moments, x.float(), len(x) + attackers, attackers)


def np_perturbation(rows: np.ndarray, kind: str) -> np.ndarray:
    mean = rows.mean(0)
    if kind == "unit":
        return -mean / np.linalg.norm(mean)
    return -rows.std(0, ddof=1) if kind == "std" else -np.sign(mean)


def np_krum_scores(x: np.ndarray, f: int) -> list[float]:
    n = len(x)
    return [sum(sorted(float(np.sum((x[i] - x[j]) ** 2)) for j in range(n) if j != i)[: n - f - 2]) for i in range(n)]


def np_selected(x: np.ndarray, f: int, against: str) -> list[int]:
    """Which rows the rule picks: Krum's one, multi-Krum's n - f best, Bulyan's n - 2f successive Krum picks."""
    if against == "krum":
        return [int(np.argmin(np_krum_scores(x, f)))]
    if against == "multi_krum":
        return [int(i) for i in np.argsort(np_krum_scores(x, f), kind="stable")[: len(x) - f]]
    remaining, picked = list(range(len(x))), []
    for _ in range(len(x) - 2 * f):
        best = remaining[int(np.argmin(np_krum_scores(x[remaining], f)))]
        picked.append(best)
        remaining.remove(best)
    return picked


def np_tailored(honest: np.ndarray, c: int, against: str, kind: str, trim: float = 0.1) -> np.ndarray:
    """The notebooks' our_attack_trmean / _median (distance search) and _mkrum (selection search), lambda_init 10,
    threshold 1e-5."""
    mean, p = honest.mean(0), np_perturbation(honest, kind)
    lam, step, found = 10.0, 10.0, 0.0

    def everything(lam: float) -> np.ndarray:
        return np.vstack([np.tile(mean + lam * p, (c, 1)), honest])

    if against in ("trimmed_mean", "median"):
        previous = -1.0
        while abs(found - lam) > 1e-5:
            x = np.sort(everything(lam), axis=0)
            cut = math.floor(trim * len(x))
            agg = x[cut : len(x) - cut].mean(0) if against == "trimmed_mean" else np.median(x, axis=0)
            loss = float(np.linalg.norm(agg - mean))
            if previous < loss:
                found, lam = lam, lam + step / 2
            else:
                lam -= step / 2
            step /= 2
            previous = loss
        return mean + found * p
    while abs(found - lam) > 1e-5:
        picked = set(np_selected(everything(lam), c, against))  # Krum: its one pick is malicious; else all are picked
        if (picked < set(range(c))) if against == "krum" else (set(range(c)) <= picked):
            found, lam = lam, lam + step / 2
        else:
            lam -= step / 2
        step /= 2
    return mean + found * p


@pytest.mark.parametrize("against", ["trimmed_mean", "median", "krum", "multi_krum", "bulyan"])
@pytest.mark.parametrize("kind", ["unit", "std", "sign"])
def test_the_tailored_attack_is_the_authors_search_against_each_rule(against: str, kind: str) -> None:
    rng = np.random.default_rng(5)
    honest = rng.normal(0.2, 1.0, size=(16, 12)).astype(np.float32).astype(np.float64)  # rows come as float32
    c = 3
    expected = np_tailored(honest, c, against, kind)
    cfg = TailoredConfig(fraction=0.2, against=against, perturbation=kind)
    got = Tailored(cfg, CONTEXT).craft(_honest(honest, c)).double().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert np.linalg.norm(got - honest.mean(0)) > 1e-3  # it moved


def np_dnc(rows: np.ndarray, coordinates: list[np.ndarray], dropped: int) -> np.ndarray:
    n, kept = len(rows), set(range(len(rows)))
    for chosen in coordinates:
        sub = rows[:, chosen]
        centred = sub - sub.mean(0)
        top = np.linalg.svd(centred, full_matrices=False)[2][0]
        scores = (centred @ top) ** 2
        kept &= set(np.argsort(scores, kind="stable")[: n - dropped].tolist())
    return rows[sorted(kept)].mean(0)


@pytest.mark.parametrize(("dimension", "iterations"), [(1000, 1), (20, 5)])
def test_dnc_is_the_papers_algorithm_and_drops_the_outliers(dimension: int, iterations: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    honest = rng.normal(0.0, 1.0, size=(12, 60))
    bad = honest.mean(0) + 20.0 * np.ones(60) / np.sqrt(60) + rng.normal(0, 0.05, size=(3, 60))  # one direction
    x = np.vstack([honest[:5], bad, honest[5:]]).astype(np.float32)
    rows = GatheredRows(list(range(15)), 60, 2**20, tmp_path / "spill", torch.device("cpu"))
    rows.put_(list(range(15)), torch.from_numpy(x), torch.ones(15))
    rule = DnC(DnCConfig(byzantine=3, dimension=dimension, iterations=iterations), 60, torch.device("cpu"))
    rule.view = ServerView(seed=7, round=4)
    got = rule.aggregate(rows).double().numpy()
    coordinates = [c.numpy() for c in dnc_coordinates(7, 4, 60, dimension, iterations)]
    assert len({tuple(c) for c in coordinates}) == (1 if dimension >= 60 else iterations)
    np.testing.assert_allclose(got, np_dnc(x.astype(np.float64), coordinates, 3), rtol=1e-5, atol=1e-6)
    kept = dnc_kept(torch.from_numpy(x), [torch.from_numpy(c) for c in coordinates], 3)
    assert not {5, 6, 7} & set(kept) and len(kept) >= 15 - 3 * iterations  # the three outliers are gone
    if iterations == 1:  # one subsample of every coordinate drops exactly them
        np.testing.assert_allclose(got, honest.mean(0), rtol=1e-5, atol=1e-6)


def _run(tmp_path: Path, name: str, attack: dict[str, Any], rule: dict[str, Any]) -> float:
    tree = tiny_config(rounds=15, clients_per_round=20, data__clients=40, model={"kind": "mlp", "hidden": [32]})
    tree |= {"attack": attack, "aggregator": rule, "name": name}
    out = tmp_path / name
    Engine(parse_config(tree), out, out / "runs.db").run()
    return float(json.loads((out / "summary.json").read_text())["final_accuracy"])


@pytest.mark.slow
def test_tailored_beats_its_rule_more_than_min_max_and_dnc_holds(tmp_path: Path) -> None:
    median = {"kind": "median"}
    tailored = _run(tmp_path, "tailored", {"kind": "agr_tailored", "fraction": 0.25, "against": "median"}, median)
    min_max = _run(tmp_path, "minmax", {"kind": "min_max", "fraction": 0.25}, median)
    # 10 of the 40 clients attack; a round of 20 holds up to 9 of them (hypergeometric), which DnC must drop
    defended = {"kind": "dnc", "byzantine": 9}
    dnc = _run(tmp_path, "dnc", {"kind": "agr_tailored", "fraction": 0.25, "against": "median"}, defended)
    clean = _run(tmp_path, "clean", {"kind": "none"}, median)  # 15 skewed rounds: the median reaches 0.34 here
    assert tailored < min_max < clean, (tailored, min_max, clean)  # 0.108 < 0.192 < 0.336 on this machine
    assert dnc > min_max and dnc > 0.8 * clean, (dnc, tailored, clean)  # 0.294
