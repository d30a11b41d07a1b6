"""Extension by one file: an algorithm and a codec defined here, registered with one call, run from YAML.

Nothing in fedsim/ knows about either; the registries are all that connect them to the config, the engine,
the split runtime and the cloud's batch validation.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import torch
import yaml
from numpy.typing import ArrayLike
from pydantic import Field
from torch import Tensor
from transformers import BertModel

from edge.onnx_bottom import EdgeEncoder
from fedsim.algorithms.base import ClientContext, ClientResult, ClientState
from fedsim.algorithms.fedavg import apply_mean_delta, weighted_delta
from fedsim.algorithms.local_sgd import local_sgd
from fedsim.cli import main
from fedsim.comm.codecs import CodecError, Encoded, codec_usages, register_codec, unregister_codec
from fedsim.comm.codecs.base import check_payload, to_tensor
from fedsim.config import AlgorithmConfig, ConfigError, load_config, register_algorithm, unregister_algorithm
from fedsim.data.base import ClientData
from fedsim.models.replica import Replica
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from fedsim.split.config import load_split_config
from fedsim.split.model import minilm_path
from fedsim.split.simulate import run_split
from fedsim.split.trainer import CloudTrainer


class HalfStepConfig(AlgorithmConfig):
    """A test algorithm: FedAvg whose server moves only ``fraction`` of the way to the clients' mean."""

    kind: Literal["halfstep"]
    fraction: float = Field(0.5, gt=0, le=1)


class HalfStep:
    name = "halfstep"
    stateful = False

    def __init__(self, cfg: HalfStepConfig) -> None:
        self.cfg = cfg

    def sum_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {"delta": numel}

    def broadcast_numel(self, numel: int, n_params: int) -> int:
        return 0

    def client_update(
        self, replica: Replica, data: ClientData, state: ClientState | None, ctx: ClientContext
    ) -> ClientResult:
        stats = local_sgd(replica, data, self.cfg, ctx)
        return ClientResult({"delta": weighted_delta(replica, ctx)}, stats.loss, stats.samples, stats.steps)

    def server_update(self, global_state: Tensor, sums: Mapping[str, Tensor], n_params: int) -> None:
        apply_mean_delta(global_state, sums, self.cfg.fraction)

    def state_dict(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        return None


@pytest.fixture
def halfstep() -> Iterator[None]:
    register_algorithm(HalfStepConfig, lambda cfg, n: HalfStep(cfg))
    yield
    unregister_algorithm("halfstep")


RUN_YAML = """
name: ext
seed: 0
rounds: 3
clients_per_round: 5
progress: false
data: {dataset: digits, clients: 10}
model: {kind: logistic}
algorithm: {kind: %s, lr: 0.1%s}
"""


def _run(tmp_path: Path, name: str, extra: str = "") -> Engine:
    path = tmp_path / f"{name}.yaml"
    path.write_text(RUN_YAML % (name, extra))
    engine = Engine(load_config(path), out_dir=tmp_path / name, db_path=tmp_path / "runs.db")
    engine.run()
    return engine


def test_a_registered_algorithm_runs_from_yaml(halfstep: None, tmp_path: Path) -> None:
    ours = _run(tmp_path, "halfstep", ", fraction: 1.0")
    fedavg = _run(tmp_path, "fedavg")
    # with fraction 1 it is FedAvg, round for round: the engine really ran our server_update
    torch.testing.assert_close(ours.global_state, fedavg.global_state)
    half = _run(tmp_path, "halfstep", ", fraction: 0.5")
    assert not torch.equal(half.global_state, fedavg.global_state)
    summary = json.loads((tmp_path / "halfstep" / "summary.json").read_text())
    assert summary["rounds"] == 3 and summary["final_accuracy"] > 0.3  # chance is 0.1
    saved = json.loads((tmp_path / "halfstep" / "config.json").read_text())
    assert saved["algorithm"] == {**saved["algorithm"], "kind": "halfstep", "fraction": 0.5}


def test_a_registered_algorithm_gets_one_line_errors(halfstep: None, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(RUN_YAML % ("halfstep", ", fraction: 2"))
    with pytest.raises(ConfigError, match=r"^algorithm\.fraction: Input should be less than or equal to 1"):
        load_config(path)
    path.write_text(RUN_YAML % ("halfstep", ", mu: 2"))
    with pytest.raises(ConfigError, match=r"unknown key 'algorithm\.mu'; allowed here: lr, .*, fraction"):
        load_config(path)


def test_an_unregistered_algorithm_is_refused_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "none.yaml"
    path.write_text(RUN_YAML % ("halfstep", ""))
    with pytest.raises(SystemExit) as exited:
        main(["run", str(path), "--out", str(tmp_path / "o"), "--db", str(tmp_path / "r.db")])
    assert exited.value.code == 2
    assert (
        "algorithm: Input tag 'halfstep' found using 'kind' does not match any of the expected tags: 'fedavg'"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "r.db").exists()


class SignCodec:
    """A test codec: each token's vector as signs (1 bit, packed) times its mean absolute value."""

    ndim = 2
    dtype_name = "sign1"

    def __init__(self) -> None:
        self.spec = "sign"

    def payload_bytes(self, shape: tuple[int, ...]) -> int:
        rows, cols = shape
        return rows * -(-cols // 8) + 4 * rows

    def encode(self, x: ArrayLike) -> Encoded:
        m = np.ascontiguousarray(x, dtype=np.float32)
        scales = np.abs(m).mean(axis=1).astype("<f4")
        return Encoded(self.spec, m.shape, np.packbits(m >= 0, axis=1).tobytes() + scales.tobytes())

    def decode(self, encoded: Encoded) -> Tensor:
        check_payload(self, encoded)
        rows, cols = encoded.shape
        width = -(-cols // 8)
        bits = np.frombuffer(encoded.payload, np.uint8, rows * width).reshape(rows, width)
        scales = np.frombuffer(encoded.payload, "<f4", rows, offset=rows * width)
        signs = np.unpackbits(bits, axis=1)[:, :cols].astype(np.float32) * 2 - 1
        return to_tensor(signs * scales[:, None])


def _sign(arg: str) -> SignCodec:
    if arg:
        raise CodecError("codec 'sign' takes no argument")
    return SignCodec()


@pytest.fixture
def sign_codec() -> Iterator[None]:
    register_codec("sign", _sign, summary="1 bit per value")
    yield
    unregister_codec("sign")


def test_a_registered_codec_runs_a_split_from_yaml(
    sign_codec: None, onnx_bottom: Path, sst2_dir: Path, encoder: BertModel, tmp_path: Path
) -> None:
    tree = {
        "codec": "sign",
        "model": {"split_layer": 5, "max_length": 16},
        "data": {"dir": str(sst2_dir), "clients": 2},
        "train": {"steps": 4, "batch_size": 8, "lr": 5e-3},
    }
    path = tmp_path / "split.yaml"
    path.write_text(yaml.safe_dump(tree))
    cfg = load_split_config(path)
    assert "sign" in codec_usages()
    edge = EdgeEncoder(onnx_bottom, minilm_path(), max_length=16)
    summary = run_split(cfg, tmp_path / "out", tmp_path / "runs.db", edge, CloudTrainer(cfg, encoder))
    assert summary["codec"] == "sign" and summary["steps"] == 4
    assert summary["compression_ratio"] > 25  # 1 bit plus a scale per token, against fp32 padded
    with RunStore.open_readonly(tmp_path / "runs.db") as store:
        rows = store.rounds(summary["run_id"])
    assert [json.loads(r.metrics_json)["codec"] for r in rows] == ["sign"] * 4


def test_the_command_line_lists_registered_codecs(sign_codec: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["codecs"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    builtin = ["fp32", "fp16", "int8", "lowrank:R", "lowrank-int8:R", "lowrank-int4:R", "basis:R", "basis-int8:R"]
    assert listed == [*builtin, "tucker:RT,RH", "sign", "CODEC+zstd"]
