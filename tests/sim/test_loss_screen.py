"""``selection.loss_screen: mad``, Hampel's identifier on the losses clients report, checked against a worked
example and against SciPy's median absolute deviation (an independent implementation of the same statistic,
Iglewicz and Hoaglin's modified z-score > 3.5 with the normal-consistent MAD), and measured against clients that
lie ``high`` to power-of-choice: the screen takes back the seats the lie won."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import median_abs_deviation
from torch import Tensor

from fedsim.config import ConfigError, parse_config
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.selection.screen import Screened, hampel
from tests.conftest import tiny_config
from tests.robust.test_reported_loss import LIE, MALICIOUS, POPULATION, _run, _seat_share, _tree

SCREEN = {"loss_screen": "mad"}


def test_a_report_far_above_the_batchs_median_is_read_as_the_median_worked_by_hand() -> None:
    # median 1.05; deviations 0.05 0.05 0.15 0.15 0.25 8.95, MAD 0.15; 10.0 scores 0.6745 x 8.95 / 0.15 = 40.2
    # (flagged, read as the median of the five kept: 1.0), 1.2 scores 0.67 (kept), 0.8 scores -1.1 (low: kept,
    # the screen is one-sided)
    said = hampel(np.array([1.0, 1.1, 0.9, 1.2, 0.8, 10.0]), 3.5)
    assert said.tolist() == pytest.approx([1.0, 1.1, 0.9, 1.2, 0.8, 1.0])
    # a client without samples (-inf) and one not yet reported (+inf) are neither screened nor counted: median
    # 2.1, MAD 0.2, 30.0 scores 94 and is read as 2.0, the median of 2.0 2.2 1.8
    said = hampel(np.array([-np.inf, 2.0, 2.2, 1.8, np.inf, 30.0]), 3.5)
    assert said.tolist() == pytest.approx([-np.inf, 2.0, 2.2, 1.8, np.inf, 2.0])
    # against a reference (the population's last reports): median 1.05, MAD 0.1; 1.3 scores 1.7 (kept), 3.0
    # scores 13.2 (flagged, read as 1.3, the batch's one kept report)
    reference = np.array([0.9, 0.9, 1.0, 1.0, 1.1, 1.1, 1.3, 3.0])
    assert hampel(np.array([1.3, 3.0]), 3.5, reference).tolist() == pytest.approx([1.3, 1.3])
    assert hampel(np.array([1.0, 1.0, 1.0, 5.0]), 3.5).tolist() == [1.0, 1.0, 1.0, 5.0]  # MAD 0: undefined


@pytest.mark.parametrize("seed", range(5))
def test_the_screen_flags_what_scipys_modified_z_score_flags(seed: int) -> None:
    rng = np.random.default_rng(seed)
    losses = np.concatenate([rng.gamma(2.0, 0.5, size=14), rng.uniform(3.0, 40.0, size=6)])
    median = np.median(losses)
    z = (losses - median) / median_abs_deviation(losses, scale="normal")  # MAD x 1.4826 = MAD / 0.6745
    expected = np.where(z > 3.5, np.median(losses[z <= 3.5]), losses)
    assert hampel(losses, 3.5) == pytest.approx(expected, rel=1e-12)
    assert (z > 3.5).sum() > 0  # the draw has outliers to screen


def test_screened_liars_lose_the_seats_their_lie_won_under_power_of_choice(tmp_path: Path) -> None:
    """The setting of test_reported_loss (6 of 20 lying high, 4 seats of 8 candidates, 30 rounds): unscreened
    they take at least 0.4 of the seats there; screened, measured 0.283 here (Oort too), as honest reports take
    (0.275)."""
    tree = _tree("power_of_choice", LIE)
    tree["selection"] |= SCREEN
    _, screened = _run(tmp_path, "screened", tree)
    assert _seat_share(screened) <= 0.35


def test_pow_ds_probe_reads_a_liars_answer_screened(tmp_path: Path) -> None:
    tree = _tree("power_of_choice", LIE, rounds=1)
    tree["selection"] |= {"variant": "pow-d", "candidates": 8} | SCREEN
    engine = Engine(parse_config(tree), out_dir=tmp_path / "s", db_path=tmp_path / "s" / "runs.db")
    said = engine.selector.inner.context.loss(0, list(range(POPULATION)), None)  # type: ignore[attr-defined]
    honest = [said[c] for c in range(POPULATION) if c not in MALICIOUS]
    assert all(said[c] == pytest.approx(np.median(honest)) for c in MALICIOUS)  # each lie read as the kept median
    assert max(honest) > np.median(honest)  # the honest highest still outrank the screened liars


def test_a_screen_on_a_selector_that_reads_no_losses_is_refused_in_one_line() -> None:
    tree = tiny_config(selection={"kind": "uniform", "loss_screen": "mad"})
    with pytest.raises(ConfigError, match=r"loss_screen=mad: selection\.kind=uniform reads no reported losses"):
        parse_config(tree)


class _Kept:
    """A selector that keeps what it is told."""

    def __init__(self) -> None:
        self.told: list[float] = []

    def select(self, r: int) -> list[int]:
        return []

    def observe(self, r: int, records: Sequence[ClientRecord]) -> None:
        self.told = [rec.loss for rec in records]

    def state_dict(self) -> dict[str, Any]:
        return {}

    def tensors(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        return None


def _records(losses: dict[int, float]) -> list[ClientRecord]:
    return [ClientRecord(cid, 0, 0.0, 1.0, 10, 10, loss) for cid, loss in losses.items()]


def test_a_round_half_liars_is_screened_against_the_populations_reports_and_that_memory_is_checkpointed() -> None:
    """Round 1's four reports are half lies (20.0): alone, their median is 10.6, their MAD 9.4, and nothing is an
    outlier; with round 0's six honest reports kept in memory (the ten: median 1.15, MAD 0.15) the lies score 85
    and are read as 1.1, the median of the round's kept 1.0 and 1.2. A screen restored from the checkpoint's
    tensors does the same."""
    cfg = parse_config(tiny_config(selection={"kind": "oort", "loss_screen": "mad"})).selection
    honest = {0: 0.9, 1: 1.0, 2: 1.1, 3: 1.1, 4: 1.2, 5: 1.3}
    half_lies = {6: 1.0, 7: 1.2, 8: 20.0, 9: 20.0}
    fresh = Screened(_Kept(), cfg)
    fresh.observe(1, _records(half_lies))
    assert fresh.inner.told == [1.0, 1.2, 20.0, 20.0]  # type: ignore[attr-defined]
    screened = Screened(_Kept(), cfg)
    screened.observe(0, _records(honest))
    restored = Screened(_Kept(), cfg)
    restored.load_state_dict(screened.state_dict(), screened.tensors())
    for screen in (screened, restored):
        screen.observe(1, _records(half_lies))
        assert screen.inner.told == pytest.approx([1.0, 1.2, 1.1, 1.1])  # type: ignore[attr-defined]
