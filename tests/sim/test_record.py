"""The round record: what waiting for data costs each device, and what a run says about where it trained."""

from __future__ import annotations

import json
from pathlib import Path

from fedsim.config import parse_config
from fedsim.runstore import RunStore
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.record import RoundRecord, StateFootprint, knob_metrics
from tests.conftest import RunFactory, tiny_config


def _record(clients: list[ClientRecord], devices: int) -> RoundRecord:
    return RoundRecord(
        round=0,
        clients=clients,
        planned=[1] * devices,
        predicted_s=[0.0] * devices,
        actual_s=[0.0] * devices,
        cohort=len(clients),
        dropped=0,
        bytes_up=0,
        bytes_down=0,
        bytes_uncompressed=0,
        bytes_up_uncompressed=0,
        wall_s=1.0,
        train_s=1.0,
        evaluated=None,
        federated=None,
        state=StateFootprint(0, 0, 0),
        lr=0.1,
    )


def test_stall_share_is_waiting_over_busy_seconds_per_device() -> None:
    clients = [
        ClientRecord(1, 0, start=0.0, end=2.0, size=8, samples=8, loss=0.5, wait_s=0.5),
        ClientRecord(2, 0, start=2.0, end=4.0, size=8, samples=8, loss=0.5, wait_s=0.5),
        ClientRecord(3, 1, start=0.0, end=1.0, size=8, samples=8, loss=0.5, wait_s=0.0),
    ]
    assert _record(clients, 3).stall_share(3) == [0.25, 0.0, 0.0]
    row = _record(clients, 3).round_row("run")
    assert json.loads(row.metrics_json)["stall_share"] == [0.25, 0.0, 0.0]


def test_a_run_records_its_accelerator_executor_and_data_stalls(run_engine: RunFactory) -> None:
    engine = run_engine(tiny_config(devices=1))
    summary = engine.summary()
    assert summary.accelerator == "cpu" and summary.executor == "sequential"
    assert 0.0 < summary.data_stall_share < 1.0  # fetching a client's data takes some time, training more
    assert engine.runstore is not None
    with RunStore.open_readonly(engine.runstore.path) as store:
        (run,) = store.list_runs()
        rows = store.rounds(run.run_id)
    shares = [json.loads(r.metrics_json)["stall_share"] for r in rows]
    assert len(shares) == 3 and all(len(s) == 1 and 0.0 <= s[0] < 1.0 for s in shares)
    assert run.summary is not None and run.summary["accelerator"] == "cpu"


def test_the_knob_and_the_probes_are_in_a_row_only_where_the_run_has_them(tmp_path: Path) -> None:
    """A plain run's rows carry no knob and no probe costs; a fixed knob's rows carry the knob; SkewScout's carry
    the probe costs in every round, 0 where it did not probe."""
    assert knob_metrics(None, None, probing=False) == {}
    assert knob_metrics(0.1, None, probing=False) == {"knob": 0.1}
    assert knob_metrics(2.0, None, probing=True) == {"knob": 2.0, "probe_bytes": 0.0, "probe_s": 0.0}
    for name, over in (
        ("plain", {}),
        ("knob", {"control": {"kind": "none", "knob": {"name": "topk", "ladder": [0.1]}}}),
    ):
        Engine(parse_config(tiny_config(rounds=2, **over)), tmp_path / name, tmp_path / f"{name}.db").run()
        with RunStore.open_readonly(tmp_path / f"{name}.db") as store:
            (run,) = store.list_runs()
            rows = [json.loads(r.metrics_json) for r in store.rounds(run.run_id)]
        assert not {"probe_bytes", "probe_s"} & set(rows[0])
        assert [row.get("knob") for row in rows] == ([None, None] if name == "plain" else [0.1, 0.1])
