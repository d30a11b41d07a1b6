"""torchrun's rank variables as fedsim reads them: a default where unset, one clear error where wrong."""

from __future__ import annotations

import os

import pytest

from fedsim.config import ConfigError
from fedsim.cores import check_rank_env, cores_per_rank, env_count


def test_an_unset_variable_is_its_default_and_a_set_one_its_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert env_count("LOCAL_WORLD_SIZE", 3, least=1) == 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", " 2\n")
    assert env_count("LOCAL_WORLD_SIZE", 3, least=1) == 2
    assert cores_per_rank() == max(1, (os.cpu_count() or 1) // 2)


@pytest.mark.parametrize("value", ["0", "-2", "two", "", "1.5"])
def test_a_world_that_is_not_a_positive_whole_number_names_the_variable(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
    with pytest.raises(ConfigError, match=f"LOCAL_WORLD_SIZE={value!r}: must be a whole number >= 1"):
        cores_per_rank()


def test_a_rank_at_or_past_its_world_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    check_rank_env()  # nothing set: a run outside torchrun
    monkeypatch.setenv("LOCAL_RANK", "3")
    check_rank_env()  # a rank with no world beside it is not compared
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    check_rank_env()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    with pytest.raises(ConfigError, match="LOCAL_RANK=3, LOCAL_WORLD_SIZE=3: a rank must be below its world"):
        check_rank_env()
