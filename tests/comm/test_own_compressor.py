"""A compressor of your own, registered from this file, runs as the built-in ones do: each client's message is
what it decodes to, the ledger charges its bytes, and the plan and summary.json name it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
from torch import Tensor

from fedsim.comm.uplink.base import UplinkState
from fedsim.config import COMPRESSORS, parse_config, register_compressor
from fedsim.config.compressor import CompressorConfig
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config


class HalfConfig(CompressorConfig):
    kind: Literal["test_half"] = "test_half"


class Half:
    """Each entry sent as float16: 2 bytes an entry, the message what float16 holds."""

    name, stateful = "test_half", False
    knob = None

    def set_knob(self, value: float) -> None:
        raise ValueError("no knob")

    def compress_(self, rows: Tensor, states: list[UplinkState], seeds: list[int], round_idx: int) -> list[int]:
        rows.copy_(rows.half().float())
        return [2 * rows.shape[1]] * rows.shape[0]


@pytest.fixture
def half() -> Iterator[None]:
    register_compressor(HalfConfig)(lambda cfg, blocks: Half())
    yield
    COMPRESSORS.unregister("test_half")


def test_an_own_compressor_runs_and_is_charged_its_bytes(tmp_path: Path, half: None) -> None:
    tree = tiny_config(rounds=2, uplink={"kind": "test_half"})
    engine = Engine(parse_config(tree), out_dir=tmp_path / "out", db_path=tmp_path / "runs.db")
    engine.run()
    numel = engine.executor.replica.numel
    dense = Engine(parse_config(tiny_config(rounds=2)), out_dir=tmp_path / "d", db_path=tmp_path / "d.db")
    dense.run()
    with RunStore.open_readonly(tmp_path / "runs.db") as store:
        rows = store.rounds(engine.run_id)
    with RunStore.open_readonly(tmp_path / "d.db") as store:
        dense_rows = store.rounds(dense.run_id)
    # five clients a round: each model update at 2 bytes an entry where dense sends 4, the rest as it was
    assert [r.bytes_up for r in rows] == [d.bytes_up - 5 * 2 * numel for d in dense_rows]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert {"stage": "uplink", "side": "client", "kind": "test_half"} in summary["stages"]
    gap = float((engine.global_state - dense.global_state).abs().max())
    assert 0 < gap < 1e-2  # float16 rounding moved the model, a little


def test_an_own_compressor_is_also_a_downlink(tmp_path: Path, half: None) -> None:
    cfg = parse_config(tiny_config(rounds=2, downlink={"kind": "test_half"}))
    engine = Engine(cfg, out_dir=tmp_path / "out", db_path=tmp_path / "runs.db")
    engine.run()
    assert engine.downlink is not None and engine.downlink.message_bytes == 2 * engine.executor.replica.numel
