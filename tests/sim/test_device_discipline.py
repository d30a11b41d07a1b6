"""The training path is written for any accelerator and proven on the CPU with the same code.

Two torch function modes watch whole rounds of every algorithm: one fails on any tensor factory called without
an explicit device (on a GPU such a tensor would land on the host and break or slow the round), the other counts
the host's reads of tensors (``item``, ``tolist``, ``float()``, ``.cpu()``, ...), each of which makes the host
wait for a GPU: a round may read a constant number of times, never once per client.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

from fedsim.config import parse_config
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.upload import SumBuffer
from fedsim.sim.runtime.host_reads import HostReads
from tests.conftest import tiny_config, with_server

FACTORIES = {
    torch.zeros,
    torch.ones,
    torch.empty,
    torch.full,
    torch.tensor,
    torch.arange,
    torch.rand,
    torch.randn,
    torch.randint,
    torch.randperm,
    torch.eye,
    torch.linspace,
    torch.empty_strided,
    torch.scalar_tensor,
}
SERVER = ["fedavg+fedadam", "fedavg+fedyogi", "fedavg+fedadagrad", "fedavg+fedavgm", "scaffold+adam"]
ALGORITHMS = ["fedavg", "fedprox", "fednova", "scaffold", "ditto", *SERVER, "fednova+adagrad", "fedprox+lamb"]
RUNS = [(name, "sequential") for name in ALGORITHMS] + [
    (name, "fused") for name in ("fedavg", "fedprox", "fednova", "scaffold", "fedavg+fedadam")
]


FEDSIM = Path(__file__).resolve().parents[2] / "fedsim"


class ExplicitDevices(TorchFunctionMode):
    """Records every factory call in fedsim's own code that leaves the device to torch's default.

    torch's own modules (``nn.Linear`` initialising its weight) are not fedsim's to fix: models are built on
    the host under the seed and then moved, by design."""

    def __init__(self) -> None:
        super().__init__()
        self.implicit: list[str] = []

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in FACTORIES and kwargs.get("device") is None:
            caller = traceback.extract_stack()[-2]
            if Path(caller.filename).resolve().is_relative_to(FEDSIM):
                self.implicit.append(f"{func.__name__} at {Path(caller.filename).name}:{caller.lineno}")
        return func(*args, **kwargs)


def _engine(tmp_path: Path, name: str, clients: int, kind: str = "sequential", **overrides: Any) -> Engine:
    tree = tiny_config(
        rounds=4,
        clients_per_round=clients,
        data__clients=16,
        executor={"kind": kind, "clients": 4},
        **with_server(name) | overrides,
    )
    directory = tmp_path / f"{name}-{kind}-{clients}"
    return Engine(parse_config(tree), out_dir=directory, db_path=directory / "runs.db")


@pytest.mark.parametrize(("name", "kind"), RUNS)
def test_every_tensor_the_training_path_creates_names_its_device(name: str, kind: str, tmp_path: Path) -> None:
    mode = ExplicitDevices()
    with mode:
        engine = _engine(tmp_path, name, clients=6, kind=kind)  # the replica, its gradient, the sums, the data placed
        for r in range(2):  # the first round creates lazily built state (server moments, control variates)
            engine.run_round(r)
    engine.close()
    assert mode.implicit == []


def test_the_top_k_knob_and_a_cnn_create_on_explicit_devices_too(tmp_path: Path) -> None:
    mode = ExplicitDevices()
    with mode:
        engine = _engine(
            tmp_path,
            "fedavg",
            clients=4,
            model={"kind": "cnn", "channels": [4, 8], "groups": 2},
            control={"kind": "none", "knob": {"name": "topk", "ladder": [0.1]}},
        )
        engine.run_round(0)
    engine.close()
    assert mode.implicit == []


def test_the_checker_catches_a_tensor_without_a_device() -> None:
    mode = ExplicitDevices()
    with mode:
        torch.zeros(3)  # this file is not fedsim's: not counted
        SumBuffer({"a": 2})  # fedsim code, default device cpu passed explicitly
    assert mode.implicit == []
    fake = ExplicitDevices()
    fake_file = FEDSIM / "sim" / "sum_buffer.py"
    code = compile("import torch\ntorch.zeros(3)\n", str(fake_file), "exec")
    with fake:
        exec(code, {})
    assert fake.implicit == ["zeros at sum_buffer.py:2"]


@pytest.mark.parametrize(
    ("name", "kind"),
    [(n, "sequential") for n in ("fedavg", "scaffold", "ditto", "fednova", "fedavg+fedadam")]
    + [("fedavg", "fused"), ("scaffold", "fused")],
)
def test_host_reads_per_round_do_not_grow_with_the_cohort(name: str, kind: str, tmp_path: Path) -> None:
    reads = []
    for clients in (2, 8, 16):  # fused in groups of 4: one, two and four groups
        engine = _engine(tmp_path, name, clients=clients, kind=kind)
        engine.run_round(0)  # lazily built state first; then count a steady round
        mode = HostReads()
        with mode:
            engine.run_round(1)
        engine.close()
        reads.append(mode.total)
    assert reads[0] == reads[1] == reads[2], reads
    assert reads[0] <= 8, reads  # the losses, the server's sums, one evaluation: a handful, not per client
