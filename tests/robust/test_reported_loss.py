"""Malicious clients that lie about their training loss (``attack.reported_loss``): the lie reaches the selector
and the run store as an honest report does, nothing reads the truth after it, it moves power-of-choice's seats
toward the liars (measured here), your own function is called with the documented arguments, the plan says
who reads the lie, and a bad setting or a bad return is one clear error."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from fedsim.config import ConfigError, parse_config
from fedsim.config.base import RunFailed
from fedsim.robust.attack import malicious_clients
from fedsim.runstore import RunStore
from fedsim.sim.rounds.cohort import sample_cohort
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.plan import describe, round_plan
from tests.conftest import tiny_config

POPULATION, FRACTION = 20, 0.3
MALICIOUS = malicious_clients(0, POPULATION, FRACTION)  # seed 0: the same 6 clients in every run here


def _tree(selection: str, attack: dict[str, Any] | None, rounds: int = 30, **more: Any) -> dict[str, Any]:
    tree = tiny_config(rounds=rounds, clients_per_round=4, data__clients=POPULATION, eval_every=100, **more)
    tree["selection"] = {"kind": selection}
    if attack is not None:
        tree["attack"] = attack
    return tree


def _run(tmp_path: Path, name: str, tree: dict[str, Any]) -> tuple[Engine, dict[int, dict[int, float | None]]]:
    """The finished engine and each round's client losses as the run store holds them."""
    engine = Engine(parse_config(tree), out_dir=tmp_path / name, db_path=tmp_path / name / "runs.db")
    engine.run()
    with RunStore.open_readonly(tmp_path / name / "runs.db") as store:
        (run,) = store.list_runs()
        rows = store.client_runs(run.run_id)
    rounds: dict[int, dict[int, float | None]] = {}
    for row in rows:
        rounds.setdefault(row.round, {})[row.client] = row.loss
    return engine, rounds


def _seat_share(rounds: dict[int, dict[int, float | None]]) -> float:
    seats = [cid for clients in rounds.values() for cid in clients]
    return sum(cid in MALICIOUS for cid in seats) / len(seats)


LIE = {"kind": "report_only", "fraction": FRACTION, "reported_loss": "high"}


def test_a_high_loss_takes_power_of_choices_seats_an_honest_one_does_not(tmp_path: Path) -> None:
    """30% of 20 clients lie ``high`` under power-of-choice (d = 8 candidates for 4 seats, drawn by size, 30
    rounds): measured, they take 0.467 of the seats; the same clients reporting honestly (a clean run:
    report_only sends honest updates, so nothing else differs) take 0.275, near their 0.3 of the population.
    (With the uniform candidate draw the lie took 0.600 against 0.317: a liar must be a candidate first, and
    the paper's draw favours large clients.) Asserted with margins: at least 0.4 against at most 0.35."""
    _, lied = _run(tmp_path, "high", _tree("power_of_choice", LIE))
    _, honest = _run(tmp_path, "honest", _tree("power_of_choice", None))
    assert _seat_share(lied) >= 0.4
    assert _seat_share(honest) <= 0.35
    # until the first liar's report is read, both runs train the same cohorts from the same models: the honest
    # clients' stored losses agree, and each liar's is 10 x the round's largest true loss (at least 1)
    checked = 0
    for r in range(30):
        if sorted(lied[r]) != sorted(honest[r]):
            break
        true = {cid: loss for cid, loss in honest[r].items() if loss is not None}
        high = 10 * max(1.0, *true.values())
        for cid, loss in lied[r].items():
            assert loss == pytest.approx(high if cid in MALICIOUS else true[cid], rel=1e-6)
            checked += cid in MALICIOUS
    assert checked > 0


def test_the_selector_reads_what_the_run_store_keeps_and_the_plan_says_who_reads_the_lie(tmp_path: Path) -> None:
    engine, rounds = _run(tmp_path, "oort", _tree("oort", LIE, rounds=4))
    reports = engine.selector.reports.loss  # type: ignore[attr-defined]  # Oort's reports, as it chooses by them
    last = {cid: loss for r in sorted(rounds) for cid, loss in rounds[r].items()}
    assert reports == pytest.approx(last)
    liars = [cid for cid in last if cid in MALICIOUS]
    assert liars and all(reports[cid] >= 10 for cid in liars)
    plan = round_plan(engine.cfg)
    said = next(stage for stage in plan if stage.stage == "report_loss")
    read_by = "selection.kind=oort, run store client_runs.loss and rounds.train_loss"
    assert said.settings == {"reported_loss": "high", "read_by": read_by}
    assert plan[0].settings["reads_lies"] == "attack.reported_loss=high"
    assert "report_loss: report_only (reported_loss=high, read_by=selection.kind=oort" in describe(plan)


def test_under_dp_the_reported_loss_is_withheld_as_any_loss(tmp_path: Path) -> None:
    privacy = {"kind": "local", "clip": 0.5, "noise_multiplier": 1.0, "delta": 1e-5}
    _, rounds = _run(tmp_path, "dp", _tree("uniform", LIE, rounds=2, privacy=privacy))
    assert rounds and all(loss is None for clients in rounds.values() for loss in clients.values())


CALLS: list[tuple[int, float, int]] = []

LIE_FILE = """
import sys

def lie(client, loss, round):
    sys.modules["tests.robust.test_reported_loss"].CALLS.append((client, loss, round))
    return 2.0 * loss + client

def nan(client, loss, round):
    return float("nan")
"""


def test_your_function_gets_client_true_loss_and_round_and_its_value_is_stored(tmp_path: Path) -> None:
    """report_only sends honest updates and uniform selection never reads losses, so the lying run trains as
    the clean run does: the clean run's stored losses are the true ones the function must be handed."""
    (tmp_path / "my_lies.py").write_text(LIE_FILE)
    attack = {"kind": "report_only", "fraction": FRACTION, "reported_loss": f"{tmp_path / 'my_lies.py'}:lie"}
    CALLS.clear()
    _, lied = _run(tmp_path, "fn", _tree("uniform", attack, rounds=3))
    _, clean = _run(tmp_path, "clean", _tree("uniform", None, rounds=3))
    expected = [(cid, clean[r][cid], r) for r in sorted(clean) for cid in sorted(clean[r]) if cid in MALICIOUS]
    assert len(CALLS) == len(expected) > 0
    for (cid, loss, r), (want_cid, want_loss, want_r) in zip(CALLS, expected, strict=True):
        assert (cid, r) == (want_cid, want_r) and want_loss is not None
        assert loss == pytest.approx(want_loss, rel=1e-6)
    for r, clients in lied.items():
        for cid, stored in clients.items():
            true = clean[r][cid]
            assert true is not None
            assert stored == pytest.approx(2 * true + cid if cid in MALICIOUS else true, rel=1e-6)
    sys.modules.pop("my_lies", None)


def test_a_nan_from_your_function_fails_the_run_in_one_line(tmp_path: Path) -> None:
    """The input was good (the function imports); the run fails where the function misbehaves: RunFailed (exit 1
    on the command line), the run marked failed, not refused as bad input."""
    (tmp_path / "my_nan.py").write_text(LIE_FILE)
    attack = {"kind": "report_only", "fraction": FRACTION, "reported_loss": f"{tmp_path / 'my_nan.py'}:nan"}
    with pytest.raises(RunFailed) as caught:
        _run(tmp_path, "nan", _tree("uniform", attack, rounds=2))
    with RunStore.open_readonly(tmp_path / "nan" / "runs.db") as store:
        assert [run.status for run in store.list_runs()] == ["failed"]
    message = str(caught.value)
    assert "\n" not in message
    r = next(r for r in range(2) if MALICIOUS & set(sample_cohort(0, r, POPULATION, 4)))  # uniform's cohorts
    first = min(MALICIOUS & set(sample_cohort(0, r, POPULATION, 4)))  # the function is called in client order
    assert message.startswith("attack.reported_loss: ") and "my_nan.py:nan returned nan" in message
    assert (
        f"for (client, loss, round) = ({first}, " in message
        and f", {r}): a reported loss is a finite number" in message
    )
    assert "a reported loss is a finite number" in message
    sys.modules.pop("my_nan", None)


@pytest.mark.parametrize(
    ("attack", "message"),
    [
        ({"kind": "sign_flip", "fraction": 0.3, "reported_loss": "highest"}, "'highest' is not honest, high, low"),
        ({"kind": "none", "reported_loss": "high"}, "attack.reported_loss=high needs malicious clients"),
        ({"kind": "report_only", "fraction": 0.3}, "kind=report_only sends honest updates"),
        ({"kind": "sign_flip", "fraction": 0.3, "reported_loss": "no_such_module_x:f"}, "cannot import"),
    ],
    ids=["unknown_name", "no_attackers", "report_only_honest", "no_module"],
)
def test_a_bad_reported_loss_is_one_line(tmp_path: Path, attack: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Engine(parse_config(_tree("uniform", attack)), out_dir=tmp_path / "bad", db_path=tmp_path / "bad" / "r.db")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value).strip()


def test_every_attack_kind_takes_reported_loss_and_summary_names_it_only_when_lying() -> None:
    honest = parse_config(_tree("uniform", {"kind": "gaussian", "fraction": 0.3}))
    lying = parse_config(_tree("uniform", {"kind": "gaussian", "fraction": 0.3, "reported_loss": "low"}))
    assert "reported_loss" not in honest.attack.settings()
    assert lying.attack.settings()["reported_loss"] == "low" and lying.attack.lies_about_loss


def test_high_and_low_on_fixed_reports_worked_by_hand() -> None:
    """high = 10 x max(1, the largest finite true loss of the round); low = 0; honest clients untouched."""
    from fedsim.robust.reported_loss import ReportedLoss

    high, low = ReportedLoss("high"), ReportedLoss("low")
    assert high.rewrite([0, 1, 2, 3], [0.5, 2.5, float("nan"), 0.2], {1, 2}, 3) == [0.5, 25.0, 25.0, 0.2]  # NaN out
    assert high.rewrite([0, 1], [0.3, 0.1], {0}, 0) == [10.0, 0.1]  # the largest loss taken as at least 1
    assert low.rewrite([0, 1], [0.3, 0.1], {0}, 0) == [0.0, 0.1]
    assert ReportedLoss("honest").rewrite([0, 1], [0.3, 0.1], {0}, 0) == [0.3, 0.1]


def test_fedbuffs_clients_report_as_a_rounds_do(tmp_path: Path) -> None:
    """FedBuff has no cohort and no selector, but its store keeps what each client said: a liar's loss is 10 x
    the server step's largest true loss (at least 1), every honest one below it."""
    from fedsim.api.launch import build_engine
    from tests.traces.test_traces import five

    five().save(tmp_path / "five.npz")
    clock = {"kind": "trace", "trace": {"path": str(tmp_path / "five.npz")}}
    settings = {"kind": "fedbuff", "concurrency": 3, "buffer": 2}
    tree = tiny_config(rounds=6, clients_per_round=None, asynchronous=settings, clock=clock, eval_every=100)
    tree["attack"] = {"kind": "report_only", "fraction": 0.3, "reported_loss": "high"}
    build_engine(parse_config(tree), tmp_path / "buff", tmp_path / "buff" / "runs.db", False).run()
    liars = malicious_clients(0, 10, 0.3)
    with RunStore.open_readonly(tmp_path / "buff" / "runs.db") as store:
        (run,) = store.list_runs()
        rows = store.client_runs(run.run_id)
    said = [(row.client in liars, row.loss) for row in rows]
    assert any(lie for lie, _ in said) and any(not lie for lie, _ in said)
    assert all(loss is not None and (loss >= 10 if lie else loss < 10) for lie, loss in said)


def test_under_pow_d_a_liar_says_its_lie_to_the_loss_probe_too(tmp_path: Path) -> None:
    """pow-d asks each candidate for its loss on the current model: a liar answers as it reports after training,
    ``high`` being 10 x the largest true loss among the candidates (at least 1); the honest answer the same."""
    tree = _tree("power_of_choice", LIE, rounds=1)
    tree["selection"] |= {"variant": "pow-d", "candidates": 8}
    lying = Engine(parse_config(tree), out_dir=tmp_path / "lying", db_path=tmp_path / "lying" / "runs.db")
    honest = Engine(
        parse_config(_tree("power_of_choice", None, rounds=1)), out_dir=tmp_path / "h", db_path=tmp_path / "h.db"
    )
    cids = list(range(POPULATION))
    said, true = lying.selector.context.loss(0, cids, None), honest.selector.context.loss(0, cids, None)  # type: ignore[attr-defined]
    high = 10 * max(1.0, *true)
    assert said.tolist() == pytest.approx([high if cid in MALICIOUS else true[cid] for cid in cids], rel=1e-12)
