"""Client selection: uniform is today's cohort sampling, power-of-choice keeps the highest-loss candidates as
Cho et al. (AISTATS 2022) define it (checked against a direct re-implementation, and against the losses a run
wrote to the run store), a resumed run chooses what the uninterrupted one did, two ranks choose what one does,
and what a selector cannot be combined with is refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedsim.api.launch import execute, final_weights
from fedsim.config import ConfigError, parse_config
from fedsim.runstore import RunStore
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.rounds.cohort import sample_cohort
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.plan import round_plan
from fedsim.sim.selection import ClientReports
from fedsim.sim.selection.power_of_choice import highest_loss
from tests.conftest import tiny_config

POWD = {"kind": "power_of_choice", "candidates": 8}
OORT = {"kind": "oort", "pacer_step": 2}  # the pacer's check every other round: it runs within a test's rounds


def rpow_d(candidates: list[int], last_loss: dict[int, float], keep: int, order: list[int]) -> list[int]:
    """The paper's rule, written out: rank the candidates by their last reported loss, highest first (a client
    never heard from first of all), equal losses in the random order ``order`` (positions), keep ``keep``."""
    position_rank = {p: n for n, p in enumerate(order)}

    def key(i: int) -> tuple[float, int]:
        loss = last_loss.get(candidates[i], float("inf"))
        return (-loss, position_rank[i])

    return sorted(candidates[i] for i in sorted(range(len(candidates)), key=key)[:keep])


def test_the_highest_loss_candidates_are_kept_unheard_ones_first_ties_in_the_random_order() -> None:
    candidates = [3, 8, 11, 20, 42]
    losses = np.array([0.5, np.inf, 2.0, 2.0, 1.0])
    order = np.array([4, 3, 0, 2, 1])  # position 3 (client 20) before position 2 (client 11)
    assert highest_loss(candidates, losses, 2, order) == [8, 20]  # worked by hand: inf, then the tie's first
    assert highest_loss(candidates, losses, 3, order) == [8, 11, 20]
    assert highest_loss(candidates, losses, 5, order) == candidates
    rng = np.random.default_rng(0)
    for _ in range(200):  # random inputs, many ties, against the rule written out
        n = int(rng.integers(1, 12))
        cands = sorted(rng.choice(100, size=n, replace=False).tolist())
        table = {c: float(rng.integers(0, 3)) for c in cands if rng.random() < 0.7}
        perm = rng.permutation(n)
        keep = int(rng.integers(1, n + 1))
        got = highest_loss(cands, np.array([table.get(c, np.inf) for c in cands]), keep, perm)
        assert got == rpow_d(cands, table, keep, perm.tolist())


def _tree(**overrides: Any) -> dict[str, Any]:
    return tiny_config(rounds=5, clients_per_round=4, data__clients=12, **overrides)


def _engine(tmp_path: Path, name: str, tree: dict[str, Any], resume: bool = False) -> Engine:
    return Engine(parse_config(tree), out_dir=tmp_path / name, db_path=tmp_path / name / "runs.db", resume=resume)


def _client_rows(out: Path) -> dict[int, dict[int, float]]:
    with RunStore.open_readonly(out / "runs.db") as store:
        (run,) = store.list_runs()
        rows = store.client_runs(run.run_id)
    rounds: dict[int, dict[int, float]] = {}
    for row in rows:
        assert row.loss is not None  # every client that trained reports its loss
        rounds.setdefault(row.round, {})[row.client] = row.loss
    return rounds


def test_uniform_is_todays_sampling_bit_for_bit(tmp_path: Path) -> None:
    default = _engine(tmp_path, "default", _tree())
    default.run()
    uniform = _engine(tmp_path, "uniform", _tree(selection={"kind": "uniform"}))
    uniform.run()
    assert torch.equal(default.global_state, uniform.global_state)
    cohorts = {r: sorted(clients) for r, clients in _client_rows(tmp_path / "uniform").items()}
    assert cohorts == {r: sample_cohort(0, r, 12, 4) for r in range(5)}
    assert [s.stage for s in round_plan(uniform.cfg)] == [s.stage for s in round_plan(default.cfg)]


def test_power_of_choice_keeps_the_candidates_whose_last_reported_loss_is_highest(tmp_path: Path) -> None:
    """Each round's cohort, recomputed from the losses the run itself wrote to the run store in the rounds
    before: the rule the paper gives (rpow-d), re-implemented above, on the same candidates and tie order. The
    candidates are drawn uniformly here (``candidates_by: uniform``) so the test can name them; the paper's draw
    by size is tests/sim/test_power_of_choice.py's."""
    engine = _engine(tmp_path, "powd", _tree(selection=POWD | {"candidates_by": "uniform"}))
    engine.run()
    rounds, reported = _client_rows(tmp_path / "powd"), dict[int, float]()
    for r in range(5):
        candidates = sample_cohort(0, r, 12, 8)
        order = np.random.default_rng([0, r, 0x706F77]).permutation(8).tolist()
        assert sorted(rounds[r]) == rpow_d(candidates, reported, 4, order)
        reported |= rounds[r]
    assert sorted(rounds[4]) != sample_cohort(0, 4, 12, 4)  # not the uniform cohort
    plan = round_plan(engine.cfg)
    assert plan[0].as_dict() == {
        "stage": "select",
        "side": "server",
        "cohort": 4,
        "candidates": 8,
        "candidates_by": "uniform",
        "variant": "rpow-d",
        "loss_batch": None,
        "kind": "power_of_choice",
    }


@pytest.mark.parametrize(
    "selection",
    [POWD, POWD | {"variant": "pow-d"}, POWD | {"variant": "cpow-d", "loss_batch": 4}, OORT],
    ids=["power_of_choice", "pow-d", "cpow-d", "oort"],
)
def test_a_resumed_run_chooses_and_ends_as_the_uninterrupted_one(tmp_path: Path, selection: dict[str, Any]) -> None:
    tree = _tree(selection=selection, checkpoint={"every": 2})
    _engine(tmp_path, "whole", tree).run()
    _engine(tmp_path, "cut", tree).run(after_round=lambda row: row.round == 2)  # reports of rounds 0-1 saved
    _engine(tmp_path, "cut", tree, resume=True).run()
    assert torch.equal(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"))
    whole, cut = _client_rows(tmp_path / "whole"), _client_rows(tmp_path / "cut")
    assert {r: sorted(c) for r, c in cut.items()} == {r: sorted(c) for r, c in whole.items()}


@pytest.mark.slow
@pytest.mark.parametrize(
    "selection",
    [{"kind": "power_of_choice"}, {"kind": "power_of_choice", "variant": "pow-d"}, OORT],
    ids=["power_of_choice", "pow-d", "oort"],
)
def test_two_ranks_choose_and_end_as_one(tmp_path: Path, selection: dict[str, Any]) -> None:
    tree = tiny_config(rounds=5, clients_per_round=6, threads=1, devices=2, selection=selection)
    tree["scheduler"] = {"kind": "even"}
    for ranks in (1, 2):
        execute(parse_config(tree), tmp_path / f"r{ranks}", tmp_path / "fedsim.db", ranks=ranks)
    torch.testing.assert_close(final_weights(tmp_path / "r2"), final_weights(tmp_path / "r1"), rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"selection": {"kind": "power_of_choice", "candidates": 3}},
            "selection.candidates=3 must be between the cohort (4 clients) and data.clients=12",
        ),
        (
            {"selection": {"kind": "power_of_choice", "candidates": 13}},
            "selection.candidates=13 must be between the cohort (4 clients) and data.clients=12",
        ),
        (
            {"selection": {"kind": "power_of_choice"}, "sampling": "poisson"},
            "selection.kind=power_of_choice keeps a fixed number of clients a round; sampling=poisson is uniform's",
        ),
        (
            {
                "selection": {"kind": "power_of_choice"},
                "privacy": {"kind": "central", "clip": 1.0, "noise_multiplier": 1},
            },
            "power_of_choice is not a uniform sample of the clients (it does not declare samples_uniformly; it reads",
        ),
        (
            {"selection": {"kind": "oort"}, "privacy": {"kind": "central", "clip": 1.0, "noise_multiplier": 1}},
            "oort is not a uniform sample of the clients (it does not declare samples_uniformly; it reads",
        ),
        (
            {"selection": {"kind": "oort", "round_threshold": 0}},
            "selection.round_threshold: Input should be greater than 0",
        ),
    ],
)
def test_what_a_selector_cannot_do_is_refused_in_one_line(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_tree(**overrides))
    text = str(caught.value)
    assert message in text and "\n" not in text, text


def test_an_asynchronous_run_refuses_a_selector() -> None:
    fedbuff = {"asynchronous": {"kind": "fedbuff", "concurrency": 4}, "clock": {"kind": "trace"}}
    tree = tiny_config(selection={"kind": "power_of_choice"}, **fedbuff)
    tree["clients_per_round"] = None
    expected = "selection.kind=power_of_choice chooses a synchronous round's cohort; asynchronous.kind=fedbuff has none"
    with pytest.raises(ConfigError, match=expected):
        parse_config(tree)


def test_the_example_selector_runs_from_its_own_file_and_keeps_the_least_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/own_selector.yaml names examples/own_selector.py's class: each round's cohort is, of its 20
    uniformly drawn candidates, those that had trained the fewest rounds (checked from the run store)."""
    from fedsim.config import load_config

    monkeypatch.chdir(Path(__file__).resolve().parents[2])  # the YAML names its file from the repository root
    cfg = load_config("examples/own_selector.yaml")
    Engine(cfg, out_dir=tmp_path / "own", db_path=tmp_path / "own" / "runs.db").run()
    rounds, served = _client_rows(tmp_path / "own"), dict.fromkeys(range(40), 0)
    for r in range(10):
        candidates = sample_cohort(0, r, 40, 20)
        chosen = sorted(rounds[r])
        assert set(chosen) <= set(candidates) and len(chosen) == 5
        left = [served[c] for c in candidates if c not in chosen]
        assert max(served[c] for c in chosen) <= min(left)
        for c in chosen:
            served[c] += 1
    uniform = Counter(c for r in range(10) for c in sample_cohort(0, r, 40, 5))
    assert max(served.values()) == 2 and max(uniform.values()) == 4  # uniform served one client 4 times


@pytest.mark.slow
def test_the_selection_bench_prints_a_line_per_selector() -> None:
    """bench/selection.py at 2 rounds: a line per selector, each with its virtual-clock figures per target."""
    bench = Path(__file__).resolve().parents[2] / "bench" / "selection.py"
    done = subprocess.run(
        [sys.executable, str(bench), "--rounds", "2", "--seeds", "0", "--candidates", "20"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [(line["kind"], line.get("candidates")) for line in lines]
    assert kinds == [("uniform", None), ("power_of_choice", 20), ("oort", None)]
    for line in lines:
        assert set(line["to_0.80"]) == {"rounds_each", "virtual_s_each", "speedup", "speedup_rounds"}
        assert 0.0 <= line["final_accuracy"] <= 1.0 and line["cohort"] == 10


def test_the_reports_round_trip_through_a_checkpoint_and_one_without_them_starts_empty() -> None:
    reports = ClientReports()
    reports.observe(0, [ClientRecord(3, 0, 0.0, 1.0, 10, 20, 0.75), ClientRecord(9, 1, 0.0, 1.0, 10, 20, 1.5)])
    reports.observe(1, [ClientRecord(3, 0, 1.0, 2.0, 10, 20, 0.25)])
    again = ClientReports()
    again.load(reports.tensors())
    assert (again.loss, again.rounds, again.last) == ({3: 0.25, 9: 1.5}, {3: 2, 9: 1}, {3: 1, 9: 0})
    assert list(again.losses([9, 3, 4])) == [1.5, 0.25, np.inf]
    again.load({})  # a checkpoint of a selector that kept no reports (uniform's)
    assert again.loss == {} and again.rounds == {}
