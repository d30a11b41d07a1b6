"""The audit's leak probe: a DP run against its diagnostics twin (the same seed, the same noise, the clients'
un-noised statistics stored and labelled). Every value the twin stores that the DP run withholds (each
client's loss and sample count, a round's train loss and sample total, federated evaluation's spread,
SecAgg+'s quantization error, the run's sample total) is looked for in everything the DP run wrote: every
column of every table of its run store (JSON columns parsed), summary.json, every checkpoint's meta.json and
tensors (read with safetensors), the CSV tracker's file, TensorBoard's events (TensorBoard's own reader),
W&B's offline log (``wandb leet inspect``) and the lines it printed. None may be found.

Both runs carry a selector and a server stage of their own, each declaring what it reads (a uniform draw that
keeps the clients' reports, as ``examples/own_selector.py`` does; a stage after the release that reads the
released sums only): what they keep goes into every checkpoint, so the probe reads what they were handed.
Two things the DP run stores are not probed, being released: the model (``global``, model.safetensors) and the
RNG's state (a function of the seed)."""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
import torch
from safetensors.torch import load_file
from torch import Tensor

from fedsim.config import SelectionConfig, ServerStageConfig, parse_config, register_selector, register_server_stage
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.rounds.cohort import sample_cohort
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.selection import ClientReports, SelectionContext
from fedsim.sim.server_stages import ServerView, StageContext
from tests.conftest import tiny_config
from tests.readback import wandb_records

PRIVACY = {"kind": "central", "clip": 0.5, "noise_multiplier": 1.0}
SECAGG = {"kind": "secagg_plus", "num_shares": 3, "reconstruction_threshold": 2}


class KeepingUniformConfig(SelectionConfig):
    kind: Literal["keeping_uniform"] = "keeping_uniform"
    samples_uniformly: ClassVar[bool] = True
    reads_clients: ClassVar[bool] = False


@register_selector(KeepingUniformConfig)
class KeepingUniform:
    """A uniform draw that keeps every report it is handed, in its checkpoint tensors."""

    def __init__(self, cfg: KeepingUniformConfig, context: SelectionContext) -> None:
        self.context, self.reports = context, ClientReports()
        assert context.samples is None  # it declared it reads nothing of the clients

    def select(self, r: int) -> list[int]:
        c = self.context
        return sample_cohort(c.seed, r, c.population, c.cohort, c.availability, c.sampling)

    def observe(self, r: int, records: Sequence[ClientRecord]) -> None:
        self.reports.observe(r, records)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def tensors(self) -> dict[str, Tensor]:
        return self.reports.tensors()

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.reports.load(tensors)


class ReleasedNormConfig(ServerStageConfig):
    kind: Literal["released_norm"] = "released_norm"
    reads_records: ClassVar[bool] = False


@register_server_stage(ReleasedNormConfig)
class ReleasedNorm:
    """After the release: the released update's norm, each round, as a metric and a tensor."""

    def __init__(self, cfg: ReleasedNormConfig, context: StageContext) -> None:
        self.norms: list[float] = []

    def begin_round(self, r: int, cohort: Sequence[int]) -> None:
        return None

    def apply_(self, view: ServerView) -> bool:
        assert not view.records or all(math.isnan(rec.loss) for rec in view.records), view.records
        self.norms.append(float(view.sums["delta"].norm()))
        return False

    def round_metrics(self) -> dict[str, float]:
        return {"norm": self.norms[-1]}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def tensors(self) -> dict[str, Tensor]:
        return {"norms": torch.tensor(self.norms, dtype=torch.float64)}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.norms = tensors["norms"].tolist()


def _run(out: Path, diagnostics: bool, capfd: pytest.CaptureFixture[str]) -> str:
    """The run's printed lines."""
    tree = tiny_config(
        rounds=3,
        clients_per_round=10,
        devices=2,
        progress=True,
        federated_eval={"kind": "holdout", "holdout": 0.2},
        checkpoint={"every": 1},
        tracking=["csv", "tensorboard", "wandb"],
        secagg=SECAGG,
        selection={"kind": "keeping_uniform"},
        server_stages=[{"kind": "released_norm"}],
        privacy={**PRIVACY, "diagnostics": diagnostics},
    )
    capfd.readouterr()
    Engine(parse_config(tree), out_dir=out, db_path=out / "runs.db").run()
    printed = capfd.readouterr()
    return printed.out + printed.err


def _numbers(value: Any, where: str) -> Iterator[tuple[str, float]]:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        yield where, float(value)
    elif isinstance(value, str):
        try:
            yield from _numbers(json.loads(value), where)
        except ValueError:
            return
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for n, item in enumerate(value):
            yield from _numbers(item, f"{where}[{n}]")


def _stored(out: Path) -> list[tuple[str, float]]:
    """Every number the run wrote, with where."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found: list[tuple[str, float]] = []
    with sqlite3.connect(out / "runs.db") as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            columns = [c[1] for c in db.execute(f"PRAGMA table_info({table})")]
            for row in db.execute(f"SELECT * FROM {table}"):
                for column, value in zip(columns, row, strict=True):
                    found += _numbers(value, f"{table}.{column}")
    for path in out.rglob("*.json"):
        found += _numbers(json.loads(path.read_text()), str(path.relative_to(out)))
    for path in out.rglob("*.csv"):
        for n, line in enumerate(path.read_text().splitlines()[1:]):
            found += _numbers([_float(cell) for cell in line.split(",")], f"{path.name}:{n}")
    (events,) = {p.parent for p in out.rglob("events.out.tfevents.*")}
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    for tag in accumulator.Tags()["scalars"]:
        found += [(f"tensorboard:{tag}", e.value) for e in accumulator.Scalars(tag)]
    found += _numbers([r for r in wandb_records(out) if r["type"] in ("history", "summary")], "wandb")
    for path in out.rglob("*.safetensors"):
        for name, tensor in load_file(path).items():
            if path.name != "model.safetensors" and name != "global" and not name.startswith("rng."):
                found += _numbers(tensor.double().flatten().tolist(), f"{path.relative_to(out)}:{name}")
    return found


def _printed(text: str) -> list[tuple[str, int]]:
    """Each number printed with at least four significant digits, with its decimals (a rounded value)."""
    found = []
    for number in re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?", text):
        digits = number.replace(",", "")
        decimals = len(digits.partition(".")[2])
        if len(digits.replace(".", "").lstrip("0")) >= 4:
            found.append((digits, decimals))
    return found


def _float(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def _withheld(out: Path) -> list[tuple[str, float]]:
    """What the diagnostics twin stores that DP withholds."""
    with sqlite3.connect(out / "runs.db") as db:
        values = [(f"client loss {c}", x) for c, x in db.execute("SELECT client, loss FROM client_runs")]
        values += [(f"client samples {c}", x) for c, x in db.execute("SELECT client, samples FROM client_runs")]
        values += [(f"round {r} train_loss", x) for r, x in db.execute("SELECT round, train_loss FROM rounds")]
        values += [(f"round {r} samples", x) for r, x in db.execute("SELECT round, samples FROM rounds")]
        for r, metrics in db.execute("SELECT round, metrics_json FROM rounds"):
            m = json.loads(metrics)
            values += _numbers(m["fed_eval"], f"round {r} fed_eval")
            values.append((f"round {r} secagg error", m["secagg_quantization_error"]))
    summary = json.loads((out / "summary.json").read_text())
    values += _numbers(summary["federated_eval"], "summary federated_eval")
    values += [("summary samples", summary["samples"]), ("summary secagg", summary["secagg"]["quantization_error"])]
    return [(what, float(x)) for what, x in values if x is not None]


def _same(withheld: float, stored: float) -> bool:
    if withheld.is_integer():  # a sample count: only counts that could not be an index or a small setting
        return withheld >= 100 and stored == withheld
    return math.isclose(stored, withheld, rel_tol=1e-6)  # float32 in TensorBoard


def test_a_dp_run_stores_none_of_what_its_diagnostics_twin_shows_dp_withholds(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    printed = _run(tmp_path / "dp", diagnostics=False, capfd=capfd)
    twin_printed = _run(tmp_path / "diag", diagnostics=True, capfd=capfd)
    withheld = _withheld(tmp_path / "diag")
    for kind in ("client loss", "client samples", "train_loss", "fed_eval", "secagg error", "summary samples"):
        assert any(kind in what for what, _ in withheld), kind  # every kind of withheld value is probed for
    stored = _stored(tmp_path / "dp")
    wheres = {where.split(":")[0].split(".")[0].split("[")[0] for where, _ in stored}
    assert {"wandb", "tensorboard", "metrics", "summary", "rounds"} <= wheres, wheres  # every writer was read
    assert any("selection.loss" in where for where, _ in stored)  # the selector's reports were read back
    assert any("released_norm.norms" in where for where, _ in stored)  # and the stage's tensor
    assert len(stored) > 500  # the run wrote plenty: the probe looked
    found = [(what, where, x) for what, w in withheld for where, x in stored if _same(w, x)]
    assert found == []
    shown = [(what, text) for what, w in withheld for text, k in _printed(printed) if f"{w:.{k}f}" == text]
    assert shown == [], printed
    assert "round 3/3" in printed and "epsilon" in printed  # the progress lines were read
    twin = _stored(tmp_path / "diag")  # the probe finds them where they are stored
    assert any(_same(w, x) for what, w in withheld if what.startswith("client loss") for _, x in twin)
    assert "samples/s" in twin_printed
