"""Split fine-tuning with 3 cloud regions: adapters average every tau steps, and SkewScout tunes tau."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import BertModel

from edge.onnx_bottom import EdgeEncoder
from fedsim.runstore import RunStore
from fedsim.split.model import minilm_path
from fedsim.split.regions import average, run_regions
from fedsim.split.trainer import CloudTrainer
from tests.split_fixtures import split_config


def _run(tmp: Path, pretrained: BertModel, onnx: Path, sst2: Path, skew: float, control: dict[str, Any]) -> dict:
    cfg = split_config(
        regions=3,
        data={"dir": str(sst2), "clients": 3, "partition": {"kind": "label_skew", "skew": skew}},
        train={"steps": 8, "batch_size": 6, "lr": 0.02},
        control=control,
    )
    trainers = [CloudTrainer(cfg, copy.deepcopy(pretrained)) for _ in range(3)]
    edge = EdgeEncoder(onnx, minilm_path(), max_length=16)
    return run_regions(cfg, tmp / f"out{skew}", tmp / "runs.db", edge, trainers)


def test_average_makes_regions_equal(pretrained: BertModel) -> None:
    cfg = split_config()
    trainers = [CloudTrainer(cfg, copy.deepcopy(pretrained)) for _ in range(2)]
    with torch.no_grad():
        trainers[0].trainable[0].add_(1.0)
    want = trainers[0].trainable[0] / 2 + trainers[1].trainable[0] / 2
    average(trainers)
    assert torch.allclose(trainers[1].trainable[0], want) and torch.equal(*(t.trainable[0] for t in trainers))


def test_fixed_tau_syncs_every_tau_steps(
    tmp_path: Path, pretrained: BertModel, onnx_bottom: Path, sst2_dir: Path
) -> None:
    summary = _run(
        tmp_path, pretrained, onnx_bottom, sst2_dir, 0.0, {"kind": "none", "knob": {"name": "tau", "ladder": [4]}}
    )
    trainable = CloudTrainer(split_config(), copy.deepcopy(pretrained)).trainable_params
    assert summary["sync_bytes"] == 2 * (2 * 4 * trainable * 3)  # steps 4 and 8, 3 regions up and down
    assert summary["probe_bytes"] == 0 and summary["tau_last"] == 4
    assert 0 <= summary["test_accuracy"] <= 1


def test_skewscout_tightens_tau_when_skew_is_raised(
    tmp_path: Path, pretrained: BertModel, onnx_bottom: Path, sst2_dir: Path
) -> None:
    # ten sentences per class: a region's own model knows its sample by heart, so even iid regions differ by
    # 15-30 points here and the band sits higher than it would on real data
    control = {"kind": "skewscout", "target": [40, 80], "probe_every": 2, "pairs": 6, "sample": 10}
    control["knob"] = {"name": "tau", "ladder": [1, 2, 4, 8], "start": 2}
    taus = {}
    for skew in (0.0, 1.0):
        summary = _run(tmp_path, pretrained, onnx_bottom, sst2_dir, skew, control)
        taus[skew] = summary["tau_last"]
        assert summary["probe_bytes"] > 0
    assert taus[1.0] < 4 < taus[0.0]  # skewed regions sync more often, iid ones less
    with RunStore(tmp_path / "runs.db") as store:
        run = store.list_runs()[0]  # the skewed run
        decisions = store.decisions(run.run_id)
    assert decisions[0].knob == "tau" and decisions[0].action == "tighten" and decisions[0].estimate > 80
    assert json.loads(decisions[0].gaps_json)


@pytest.mark.parametrize(("tree", "message"), [({"control": {"kind": "none", "knob": {"name": "topk"}}}, "tunes tau")])
def test_split_control_takes_only_tau(tree: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_config(**tree)


SST2 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "sst2"


@pytest.mark.skipif(not (SST2 / "train.tsv").is_file(), reason="needs ../shared/data/sst2")
def test_on_sst2_skewscout_holds_tau_when_iid_and_tightens_it_under_full_skew(
    tmp_path: Path, pretrained: BertModel, onnx_bottom: Path
) -> None:
    control = {"kind": "skewscout", "target": [1, 3], "probe_every": 3, "pairs": 6, "sample": 48}
    control["knob"] = {"name": "tau", "ladder": [1, 2, 4, 8, 16], "start": 2}
    taus = {}
    for skew in (0.0, 1.0):
        partition = {"kind": "label_skew", "skew": skew}
        cfg = split_config(
            regions=3,
            data={"dir": str(SST2), "clients": 3, "train_limit": 900, "test_limit": 100, "partition": partition},
            train={"steps": 12, "batch_size": 16, "lr": 0.005},
            control=control,
        )
        trainers = [CloudTrainer(cfg, copy.deepcopy(pretrained)) for _ in range(3)]
        edge = EdgeEncoder(onnx_bottom, minilm_path(), max_length=16)
        taus[skew] = run_regions(cfg, tmp_path / f"o{skew}", tmp_path / "runs.db", edge, trainers)["tau_last"]
    assert taus[1.0] < 4 <= taus[0.0]  # raised skew: tau tightened from its start (4); iid: not tightened


class Crashing:
    """The edge's bottom, failing on its ``after``-th batch: the process dies mid-run."""

    def __init__(self, edge: EdgeEncoder, after: int) -> None:
        self.edge, self.left = edge, after

    def encode(self, texts: list[str]) -> Any:
        self.left -= 1
        if self.left < 0:
            raise RuntimeError("the machine went away")
        return self.edge.encode(texts)


def test_regions_resume_from_their_checkpoint_to_the_same_adapters_and_controller(
    tmp_path: Path, pretrained: BertModel, onnx_bottom: Path, sst2_dir: Path
) -> None:
    from safetensors.torch import load_file

    cfg = split_config(
        regions=3,
        codec="basis-int8:8",
        data={"dir": str(sst2_dir), "clients": 3, "partition": {"kind": "label_skew", "skew": 1.0}},
        train={"steps": 12, "batch_size": 6, "lr": 0.02, "checkpoint_every": 4},
        control={
            "kind": "skewscout",
            "knob": {"name": "tau", "ladder": [1, 2, 4], "start": 2},
            "probe_every": 3,
            "sample": 6,
            "target": [0, 5],
            "pairs": 2,
        },
    )
    edge = EdgeEncoder(onnx_bottom, minilm_path(), max_length=16)

    def trainers() -> list[CloudTrainer]:
        return [CloudTrainer(cfg, copy.deepcopy(pretrained)) for _ in range(3)]

    whole = run_regions(cfg, tmp_path / "whole", tmp_path / "whole.db", edge, trainers())
    cut, db = tmp_path / "cut", tmp_path / "cut.db"
    with pytest.raises(RuntimeError, match="went away"):  # 3 probe samples, then 3 batches a step: dies in step 10
        run_regions(cfg, cut, db, Crashing(edge, after=3 + 3 * 9 + 1), trainers())
    assert json.loads((cut / "regions" / "progress.json").read_text())["step"] == 8
    resumed = run_regions(cfg, cut, db, edge, trainers(), resume=True)

    for name in ("adapter_model.safetensors", "head.safetensors"):
        want, got = load_file(tmp_path / "whole" / "adapters" / name), load_file(cut / "adapters" / name)
        assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want), name
    for key in ("test_accuracy", "sync_bytes", "probe_bytes", "tau_first", "tau_last", "tau_mean", "bytes_up"):
        assert whole[key] == resumed[key], key
    with RunStore.open_readonly(tmp_path / "whole.db") as a, RunStore.open_readonly(db) as b:
        (run,) = b.list_runs()
        assert run.status == "finished" and run.run_id == resumed["run_id"]
        assert [r.round for r in b.rounds(run.run_id)] == list(range(1, 13))
        decided = [(d.round, d.old, d.new, d.action) for d in a.decisions(whole["run_id"])]
        assert decided == [(d.round, d.old, d.new, d.action) for d in b.decisions(run.run_id)] and decided
