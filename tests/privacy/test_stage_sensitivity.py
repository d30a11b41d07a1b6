"""Why a stage that reads each client's update is refused beside central DP at every point of the round, not
only before the rule: on a concrete replace-one pair of cohorts, worked out by hand below, the reputation
filter of examples/own_server_stage.py moves the released sum by 51 clips where the accountant assumes 2.

The pair (clip C, direction e, 50 clients, weight 1 each as DP weighs them): in D client 0 and 25 others send
+Ce and 24 send -Ce; in D' client 0 sends -Ce instead (replace-one: one client's update changed within the
clip). The plain sums are 2Ce and 0: they differ by 2C, the sensitivity the accountant calibrates the noise to.
The filter scores each update by its cosine with the coordinate-wise median (torch's, the lower of the two
middle values for an even count): in D the median is +Ce, so the 24 -Ce clients score -1, their reputation
0.5 * 0 + 0.5 * -1 = -0.5 falls below 0.1 and they are taken off, leaving 26Ce; in D' the 25th smallest of
50 is -Ce, so the 25 +Ce clients are taken off, leaving -25Ce. The filtered sums differ by 51C: whatever noise
the release added, subtracting un-noised rows after it changes the sum by far more than was accounted."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
import torch

from fedsim.config import ConfigError, parse_config, register_server_stage
from fedsim.robust.gather import GatheredRows
from fedsim.sim.server_stages import ServerView, StageContext
from fedsim.sim.server_stages.contributions import Contributions
from tests.conftest import load_module, tiny_config

ROOT = Path(__file__).resolve().parents[2]
CLIP = 1.0
CENTRAL = {"kind": "central", "clip": CLIP, "noise_multiplier": 1.0}


def _example() -> Any:
    return load_module("own_server_stage", ROOT / "examples" / "own_server_stage.py")


def _cohort(first: float) -> tuple[list[float], torch.Tensor]:
    """Each client's update along e (client 0's is ``first``) and the (50, 3) rows."""
    along = [first] + [CLIP] * 25 + [-CLIP] * 24
    rows = torch.zeros(50, 3)
    rows[:, 0] = torch.tensor(along)
    return along, rows


def _filtered(rows: torch.Tensor) -> float:
    """The sum along e once a fresh reputation stage has run on it."""
    example = _example()
    stage = example.Reputation(example.ReputationConfig(), StageContext(seed=0, population=50, n_params=3))
    gathered = GatheredRows(range(50), 3, 2**20, Path("unused"), torch.device("cpu"))
    gathered.put_(list(range(50)), rows, torch.ones(50))
    parts = Contributions(
        {"weight": 1, "clients": 1, "unclipped": 1}, range(50), 2**20, Path("unused"), torch.device("cpu")
    )
    parts.keep_(
        list(range(50)), {"weight": torch.ones(50, 1), "clients": torch.ones(50, 1), "unclipped": torch.zeros(50, 1)}
    )
    sums = {"delta": rows.sum(0), "weight": torch.tensor([50.0]), "clients": torch.tensor([50.0])}
    sums["unclipped"] = torch.tensor([0.0])
    stage.begin_round(0, list(range(50)))
    assert stage.apply_(ServerView(0, sums, torch.zeros(3), 3, (), gathered, parts)) is False
    return float(sums["delta"][0])


def test_a_row_reading_filter_moves_a_replace_one_pairs_sum_by_51_clips_where_2_are_accounted() -> None:
    d, rows = _cohort(+CLIP)
    d_prime, rows_prime = _cohort(-CLIP)
    assert sum(x != y for x, y in zip(d, d_prime, strict=True)) == 1  # replace-one: client 0 alone changed
    assert max(abs(x) for x in d + d_prime) <= CLIP  # within the clip, as DP's clipping leaves them
    assert abs(float(rows.sum(0)[0] - rows_prime.sum(0)[0])) == pytest.approx(2 * CLIP)  # what is accounted
    assert _filtered(rows) == pytest.approx(26 * CLIP)
    assert _filtered(rows_prime) == pytest.approx(-25 * CLIP)
    assert abs(_filtered(rows) - _filtered(rows_prime)) == pytest.approx(51 * CLIP)  # what it would release


def test_the_same_filter_after_the_release_is_refused_beside_central_dp_and_runs_beside_local() -> None:
    example = _example()

    class AfterRelease(example.ReputationConfig):  # type: ignore[name-defined]
        kind: Literal["reputation_after_release"] = "reputation_after_release"
        at: Literal["after_release", "after_update"] = "after_release"
        removes_clients: ClassVar[bool] = False  # a stage that takes clients out runs before_rule (refused here)

    register_server_stage(AfterRelease)(example.Reputation)
    stages = [{"kind": "reputation_after_release"}]
    with pytest.raises(ConfigError, match="reputation_after_release reads each client's un-noised update"):
        parse_config(tiny_config(server_stages=stages, privacy=CENTRAL))
    for point in ("after_release", "after_update"):  # wherever it runs, what it reads is the same
        with pytest.raises(ConfigError, match="un-noised update"):
            parse_config(
                tiny_config(server_stages=[{"kind": "reputation_after_release", "at": point}], privacy=CENTRAL)
            )
    parse_config(tiny_config(server_stages=stages, privacy=CENTRAL | {"kind": "local"}))  # each row already noised
