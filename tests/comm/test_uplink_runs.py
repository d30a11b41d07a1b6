"""Uplink compressors in whole runs: bytes the ledger charges, error-feedback memory in the state store across
checkpoint and resume, the fused executor and two ranks, and the settings refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.api.launch import final_weights
from fedsim.comm.uplink import Blocks
from fedsim.comm.uplink.base import sign_bytes
from fedsim.config import parse_config
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from tests.conftest import on_one_and_two_ranks, refused, tiny_config

MLP = {"kind": "mlp", "hidden": [32]}  # 64x32 and 32x10 weights: PowerSGD compresses the first at rank 2
SETTINGS: dict[str, dict[str, Any]] = {
    "powersgd": {"rank": 2},
    "acpsgd": {"rank": 2},
    "onebit": {"warmup": 1},
    "qsgd": {"levels": 4},
    "topk": {"fraction": 0.1},
}
STATEFUL = ["topk", "ef_sign", "onebit", "onebit_lamb", "powersgd", "acpsgd"]


def _tree(kind: str, **overrides: Any) -> dict[str, Any]:
    tree: dict[str, Any] = {"rounds": 4, "clients_per_round": 6, "threads": 1, "model": MLP, "data__clients": 12}
    if kind == "onebit_lamb":  # the onebit uplink with 1-bit LAMB's server half
        tree["server_optimizer"] = {"kind": "onebit_lamb", "warmup": 1, "lr": 0.3}
        kind = "onebit"
    return tiny_config(**tree, uplink={"kind": kind, **SETTINGS.get(kind, {})}, **overrides)


def _engine(tmp_path: Path, name: str, tree: dict[str, Any], resume: bool = False) -> Engine:
    return Engine(parse_config(tree), tmp_path / name, tmp_path / name / "runs.db", resume=resume)


def _bytes_up(engine: Engine) -> list[int]:
    with RunStore.open_readonly(engine.out_dir / "runs.db") as store:
        (run,) = store.list_runs()
        return [r.bytes_up for r in store.rounds(run.run_id)]


def test_the_ledger_charges_each_client_its_compressed_message(tmp_path: Path) -> None:
    dense = _engine(tmp_path, "dense", _tree("none"))
    dense.run()
    signed = _engine(tmp_path, "sign", _tree("ef_sign"))
    signed.run()
    numel = dense.executor.replica.numel
    saved = 6 * (4 * numel - sign_bytes(Blocks(dense.executor.replica.shapes)))  # six clients a round
    assert [d - s for d, s in zip(_bytes_up(dense), _bytes_up(signed), strict=True)] == [saved] * 4
    assert 4 * numel / sign_bytes(Blocks(dense.executor.replica.shapes)) > 25  # about 32x on this model


@pytest.mark.parametrize("kind", STATEFUL)
def test_memory_survives_the_disk_store_and_checkpoint_resume_bit_identically(kind: str, tmp_path: Path) -> None:
    tree = _tree(kind, state={"backend": "disk"}, checkpoint={"every": 2})
    whole = _engine(tmp_path, "whole", tree)
    whole.run()
    cut = _engine(tmp_path, "cut", tree)
    cut.run(after_round=lambda row: row.round == 1)
    resumed = _engine(tmp_path, "cut", tree, resume=True)
    resumed.run()
    assert torch.equal(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"))
    kept = [cid for cid in range(12) if whole.store.get(cid) is not None]
    assert kept  # clients that trained carry their compressor's memory in the store
    for cid in kept:
        mine, theirs = whole.store.get(cid), resumed.store.get(cid)
        assert mine is not None and theirs is not None and mine.keys() == theirs.keys()
        assert any(name.startswith("uplink.") for name in mine)
        assert all(torch.equal(mine[name], theirs[name]) for name in mine)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["powersgd", "qsgd", "onebit", "onebit_lamb", "acpsgd"])
def test_fused_and_two_ranks_give_the_sequential_weights(kind: str, tmp_path: Path) -> None:
    sequential = _engine(tmp_path, "sequential", _tree(kind))
    sequential.run()
    fused = _engine(tmp_path, "fused", _tree(kind, executor={"kind": "fused", "clients": 3}))
    fused.run()
    assert fused.executor_kind == "fused"
    torch.testing.assert_close(fused.global_state, sequential.global_state, rtol=0, atol=1e-5)
    assert _bytes_up(fused) == _bytes_up(sequential)
    one, two = on_one_and_two_ranks(_tree(kind), tmp_path / "ranks")
    torch.testing.assert_close(two, one, rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["control.knob.name=rank"], "control.knob.name=rank tunes uplink.kind=powersgd, but uplink.kind is none"),
        (["uplink.kind=qsgd", "control.knob.name=rank"], "tunes uplink.kind=powersgd, but uplink.kind is qsgd"),
        (["uplink.kind=powersgd", "uplink.rank=0"], "uplink.rank"),
        (["uplink.kind=qsgd", "uplink.levels=nan"], "uplink.levels"),
        (["uplink.kind=gzip"], "uplink.kind"),
        (
            [
                "uplink.kind=ef_sign",
                "secagg.kind=secagg_plus",
                "secagg.num_shares=3",
                "secagg.reconstruction_threshold=2",
            ],
            "uplink.kind=ef_sign cannot compress it",
        ),
        (
            ["uplink.kind=qsgd", "privacy.kind=local", "privacy.clip=1", "privacy.noise_multiplier=1"],
            "privacy.kind=local adds dense noise to each client's message, which uplink.kind=qsgd would then have",
        ),
    ],
)
def test_bad_uplink_settings_are_one_line_and_exit_2(
    settings: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in refused(tmp_path, capsys, settings)
