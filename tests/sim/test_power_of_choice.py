"""Power-of-choice against its paper (Cho, Wang and Joshi, "Towards Understanding Biased Client Selection in
Federated Learning", AISTATS 2022; arXiv 2010.01243, the Power-of-Choice strategy's three steps and its
variants cpow-d and rpow-d) and the authors' code (their supplementary material, 1776-supp/code/dnn:
util_v4.sel_client draws the candidate set with ``np.random.choice(K, p=p_k, size=d, replace=False)`` and
ranks it by F_k(w) (pow-d) or by the stale reported losses (rpow-d, never-selected clients at +inf);
train_dnn.evaluate_client scores F_k on all a client's data, or on ``random.sample`` of ``b`` of it (cpow-d)),
which Flower's baseline (baselines/power_of_choice, strategy.PowerOfChoice.sample_clients) follows.

Every reference below is written from those, never from fedsim's code: the exact inclusion probabilities of
successive sampling without replacement by enumeration, the top-m rule, losses worked by hand."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fedsim.config import ConfigError, load_config, parse_config
from fedsim.data import build_dataset
from fedsim.data.base import ArrayDataset, ClientData
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.rounds.cohort import reachable, sample_cohort
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.selection import SelectionContext, build_selector
from fedsim.sim.selection.base import Selector
from tests.conftest import tiny_config

ROOT = Path(__file__).resolve().parents[2]
SIZES = [1, 2, 3, 4, 5, 9]  # six clients' samples: p_k = n_k / 24


def inclusion(p: Sequence[float], d: int) -> list[float]:
    """Each unit's probability of being in a sample of ``d`` drawn successively without replacement, unit k
    with probability p_k among those not yet drawn (the paper's "d clients without replacement such that client
    k is chosen with probability p_k"; numpy's choice(replace=False, p=...) the authors call): the sum, over
    every ordered draw (i_1, ..., i_d) that contains k, of prod_j p_{i_j} / (1 - sum_{l<j} p_{i_l})."""
    total = sum(p)
    q = [x / total for x in p]
    out = [0.0] * len(q)
    for seq in itertools.permutations(range(len(q)), d):
        prob, left = 1.0, 1.0
        for i in seq:
            prob *= q[i] / left
            left -= q[i]
        for i in seq:
            out[i] += prob
    return out


def _within_binomial(count: float, expected: float, var: float) -> bool:
    return abs(count - expected) <= 4.5 * math.sqrt(var) + 1e-9  # false alarm about 1e-5 per client


def _frequencies(selector: Selector, rounds: int, population: int) -> np.ndarray:
    counts = Counter(c for r in range(rounds) for c in selector.select(r))
    return np.array([counts[c] for c in range(population)], dtype=np.float64)


def _sized(population: int, cohort: int, candidates: int, sizes: Sequence[int], **context: Any) -> Selector:
    cfg = parse_config(
        tiny_config(
            clients_per_round=cohort,
            data__clients=population,
            selection={"kind": "power_of_choice", "candidates": candidates, **context.pop("settings", {})},
        )
    )
    return build_selector(cfg.selection, SelectionContext(0, population, cohort, samples=sizes.__getitem__, **context))


def test_candidates_come_in_proportion_to_data_size_without_replacement_as_successive_sampling() -> None:
    """Six clients of 1 to 9 samples, d = 3 = the cohort (so with no loss reported the cohort is the candidate
    set): over 5,000 rounds each client's inclusion count is within 4.5 binomial standard deviations of the
    exact successive-sampling probability (0.169 for the 1-sample client, 0.839 for the 9-sample one; uniform
    would be 0.5 for all). On the trace clock only the clients online are drawn, p renormalised over them."""
    rounds = 5000
    expected = inclusion(SIZES, 3)
    counts = _frequencies(_sized(6, 3, 3, SIZES), rounds, 6)
    for k in range(6):
        assert _within_binomial(counts[k], rounds * expected[k], rounds * expected[k] * (1 - expected[k])), k
    assert [round(pi, 3) for pi in expected] == [0.169, 0.321, 0.454, 0.565, 0.651, 0.839]  # sums to d = 3

    online = np.array([0, 2, 3, 5])  # the trace's filter: p over these four only
    counts = _frequencies(_sized(6, 3, 3, SIZES, online=lambda: online), rounds, 6)
    restricted = inclusion([SIZES[c] for c in online], 3)
    assert counts[1] == counts[4] == 0
    for k, pi in zip(online, restricted, strict=True):
        assert _within_binomial(counts[k], rounds * pi, rounds * pi * (1 - pi)), k


def test_with_availability_the_candidates_are_drawn_by_size_among_the_reachable_clients() -> None:
    """emulation.availability 0.6: each round's candidates are reachable ones (the emulation's draw, read here
    as an input), and each client's count over 3,000 rounds is within 4.5 standard deviations of the sum of its
    round-by-round successive-sampling probabilities over that round's reachable clients."""
    rounds, population, d = 3000, 6, 3
    selector = _sized(population, d, d, SIZES, availability=0.6)
    expected, var, counts = np.zeros(population), np.zeros(population), np.zeros(population)
    for r in range(rounds):
        up = np.arange(population)[reachable(0, r, np.arange(population), 0.6)]
        chosen = selector.select(r)
        assert set(chosen) <= set(up.tolist()) and len(chosen) == min(d, len(up))
        counts[chosen] += 1
        if len(up) <= d:  # everyone reachable is drawn
            expected[up] += 1
            continue
        pis = inclusion([SIZES[c] for c in up], d)
        expected[up] += pis
        var[up] += [pi * (1 - pi) for pi in pis]
    for k in range(population):
        assert _within_binomial(counts[k], expected[k], var[k]), (k, counts[k], expected[k])


def test_on_the_quickstart_with_no_loss_reported_selection_follows_data_size() -> None:
    """The issue's bar: examples/quickstart.yaml's 100 clients (Dirichlet 0.5 over digits, 2 to 45 samples),
    d = 20, a cohort of 10, nothing reported yet (every candidate ties at +inf, so the cohort is 10 of the 20 at
    random): over 2,000 rounds each client's selection frequency correlates with its size, Pearson r > 0.5
    (0.98 when written; uniform candidates gave 0.12, sampling noise)."""
    cfg = load_config(ROOT / "examples" / "quickstart.yaml")
    data = build_dataset(cfg.data, cfg.seed, False)
    sizes = [data.n_samples(c) for c in range(data.num_clients)]
    by_size = _frequencies(_sized(100, 10, 20, sizes), 2000, 100)
    r_size = float(np.corrcoef(by_size, sizes)[0, 1])
    assert r_size > 0.5, r_size


def test_the_uniform_variant_draws_todays_candidates_uniformly() -> None:
    """candidates_by: uniform is the draw fedsim made before, cohort for cohort (fedsim.sim.rounds.cohort's
    sample_cohort), and each of the six uneven clients is in it with probability d / K = 1/2."""
    selector = _sized(6, 3, 3, SIZES, settings={"candidates_by": "uniform"})
    rounds = 4000
    assert [selector.select(r) for r in range(50)] == [sample_cohort(0, r, 6, 3) for r in range(50)]
    counts = _frequencies(selector, rounds, 6)
    for k in range(6):
        assert _within_binomial(counts[k], rounds / 2, rounds / 4), k


def test_rpow_d_keeps_the_highest_last_reported_losses_clients_never_heard_from_first() -> None:
    """rpow-d by hand: five clients all candidates (d = K = 5), a cohort of 2. Reported: 0 -> 0.5, 1 -> 2.0,
    3 -> 1.0; 2 and 4 never trained, so they rank first (+inf). Once 2 reports 0.1 and 4 reports 0.2 the
    cohort is the two highest stale losses, 1 and 3."""
    selector = _sized(5, 2, 5, [10] * 5)

    def report(r: int, losses: dict[int, float]) -> None:
        selector.observe(r, [ClientRecord(c, 0, 0.0, 1.0, 10, 20, loss) for c, loss in losses.items()])

    report(0, {0: 0.5, 1: 2.0, 3: 1.0})
    assert selector.select(1) == [2, 4]
    report(1, {2: 0.1, 4: 0.2})
    assert selector.select(2) == [1, 3]


def _four_clients() -> ArrayDataset:
    """Four clients of 1-d regression targets whose mean square, the loss of the zero model, is worked by hand:
    client 0 [1, 1, 1, 1] -> 1; client 1 [0, 0, 0, 3] -> 9/4; client 2 [2, 2] -> 4; client 3 [0 x 7, 4] -> 2."""
    ys = [[1.0] * 4, [0.0, 0.0, 0.0, 3.0], [2.0, 2.0], [0.0] * 7 + [4.0]]
    y = torch.tensor([v for part in ys for v in part])
    x = torch.ones(len(y), 1)
    starts = np.cumsum([0] + [len(p) for p in ys])
    parts = [np.arange(starts[k], starts[k + 1]) for k in range(4)]
    return ArrayDataset(x, y, parts, ClientData(x[:4], y[:4]), num_classes=1)


def _square(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((output.squeeze(-1) - target) ** 2).mean()


def _zero_model_engine(tmp_path: Path, variant: str, **selection: Any) -> Engine:
    model = nn.Linear(1, 1, bias=False)
    nn.init.zeros_(model.weight)  # the current global model predicts 0: each sample's loss is y^2
    chosen = {"kind": "power_of_choice", "candidates": 4, "variant": variant, **selection}
    tree = tiny_config(clients_per_round=2, data__clients=4, selection=chosen)
    out = tmp_path / variant
    return Engine(parse_config(tree), out, out / "runs.db", dataset=_four_clients(), model=model, task=_square)


def test_pow_d_keeps_the_highest_losses_of_the_current_model_on_all_local_data(tmp_path: Path) -> None:
    """pow-d by hand: F = (1, 9/4, 4, 2) on the zero model, so with every client a candidate the cohort of 2
    is {1, 2}. Each candidate is sent the model (1 float32) and sends one float32 back: 4 x 4 bytes each way,
    charged to the round under kind selection."""
    engine = _zero_model_engine(tmp_path, "pow-d")
    assert engine.selector.select(0) == [1, 2]
    assert (engine.ledger.round_up, engine.ledger.round_down) == (16, 16)
    assert engine.ledger.by_kind == {"selection": 32}


def test_cpow_d_scores_a_minibatch_of_b_samples_drawn_without_replacement(tmp_path: Path) -> None:
    """cpow-d by hand, b = 2, every client a candidate: client 0's batch mean is 1 and client 2's (2 samples,
    all of them) 4 whatever is drawn; client 1's is 9/2 when the batch holds its 3 (probability 1 - C(3,2)/C(4,2)
    = 1/2), else 0; client 3's is 8 when it holds its 4 (1 - C(7,2)/C(8,2) = 1/4), else 0. So the cohort of 2 is
    {1, 3} with probability 1/2 x 1/4 = 1/8, {1, 2} with 3/8, {2, 3} with 1/8 and {0, 2} with 3/8, and never
    pow-d's alone. Over 2,000 rounds of the same model each frequency is within 4.5 binomial deviations."""
    engine = _zero_model_engine(tmp_path, "cpow-d", loss_batch=2)
    rounds = 2000
    seen = Counter(tuple(engine.selector.select(r)) for r in range(rounds))
    expected = {(1, 3): 1 / 8, (1, 2): 3 / 8, (2, 3): 1 / 8, (0, 2): 3 / 8}
    assert set(seen) == set(expected)
    for cohort, p in expected.items():
        assert _within_binomial(seen[cohort], rounds * p, rounds * p * (1 - p)), (cohort, seen[cohort])


def test_the_minibatch_is_only_cpow_ds_and_a_probe_is_needed() -> None:
    with pytest.raises(ConfigError, match=r"selection\.loss_batch is cpow-d's mini-batch; variant=pow-d does not"):
        parse_config(tiny_config(selection={"kind": "power_of_choice", "variant": "pow-d", "loss_batch": 8}))
    cfg = parse_config(tiny_config(selection={"kind": "power_of_choice", "variant": "pow-d"}))
    with pytest.raises(ConfigError, match=r"selection\.variant=pow-d has the candidates score the current model"):
        build_selector(cfg.selection, SelectionContext(0, 10, 5, samples=lambda c: 1))
