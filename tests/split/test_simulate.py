"""``run_split``: edge clients with ONNX bottoms and the cloud trainer in one process, logged and summarised."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from transformers import BertModel

from edge.onnx_bottom import EdgeEncoder
from fedsim.comm.codecs import build_codec
from fedsim.data.sst2 import load_sst2
from fedsim.runstore import RunStore
from fedsim.split.edge_side import edge_clients, send
from fedsim.split.model import minilm_path
from fedsim.split.simulate import run_split
from fedsim.split.trainer import CloudTrainer
from tests.split_fixtures import split_config


def test_clients_get_skewed_partitions_and_cycle_through_them(sst2_dir: Path) -> None:
    cfg = split_config(data={"dir": str(sst2_dir), "clients": 2, "partition": {"kind": "label_skew", "skew": 1.0}})
    train = load_sst2(sst2_dir, "train")
    clients = edge_clients(cfg, train)
    assert sum(len(c.data) for c in clients) == len(train)
    assert [set(c.data.labels.tolist()) for c in clients] in ([{0}, {1}], [{1}, {0}])
    client = clients[0]
    seen = np.concatenate([client.next_indices(7) for _ in range(len(client.data))])
    counts = np.bincount(seen, minlength=len(client.data))
    assert counts.min() == counts.max() == 7  # every sentence once per epoch


def test_send_reports_wire_bytes_against_the_padded_baseline(onnx_bottom: Path, sst2_dir: Path) -> None:
    edge = EdgeEncoder(onnx_bottom, minilm_path(), max_length=16)
    data = load_sst2(sst2_dir, "test")
    exact = send(edge, build_codec("fp32"), data)
    assert exact.error == 0.0
    longest = int(exact.wire.lengths.max())
    assert exact.padded_bytes == len(data) * longest * 384 * 4
    assert exact.wire.nbytes == int(exact.wire.lengths.sum()) * 384 * 4 + 8 * len(data)
    low = send(edge, build_codec("lowrank-int8:4"), data)
    assert low.wire.nbytes < exact.wire.nbytes / 20
    assert 0 < low.error < 1


def test_run_split_trains_logs_and_summarises(
    onnx_bottom: Path, sst2_dir: Path, encoder: BertModel, tmp_path: Path
) -> None:
    cfg = split_config(
        name="t",
        codec="lowrank-int8:8",
        data={"dir": str(sst2_dir), "clients": 2},
        train={"steps": 12, "batch_size": 10, "lr": 5e-3, "eval_every": 6, "checkpoint_every": 5},
    )
    edge = EdgeEncoder(onnx_bottom, minilm_path(), max_length=16)
    out, db = tmp_path / "run", tmp_path / "runs.db"
    losses: list[float] = []
    trainer = CloudTrainer(cfg, encoder)
    saves: list[int] = []
    save = trainer.save

    def counted_save(out: Path, progress: Any = None) -> Any:
        saves.append(trainer.step)
        return save(out, progress)

    trainer.save = counted_save  # type: ignore[method-assign]
    summary = run_split(cfg, out, db, edge, trainer, on_step=lambda s, loss, accuracy: losses.append(loss))

    assert json.loads((out / "summary.json").read_text()) == summary
    assert summary["steps"] == 12
    assert summary["compression_ratio"] == pytest.approx(summary["bytes_uncompressed"] / summary["bytes_up"])
    assert summary["compression_ratio"] > 5
    # both baselines: stripping padding is part of the padded figure, not of the unpadded one
    assert 1 < summary["compression_ratio_unpadded"] < summary["compression_ratio"]
    assert summary["test_accuracy"] >= 0.8  # ten sentences a few steps can learn
    assert 0.5 <= summary["test_accuracy_uncompressed"] <= 1  # the same adapters on fp32 activations
    assert summary["peak_activation_mb"] > 0
    assert np.mean(losses[-4:]) < np.mean(losses[:4])
    assert (out / "adapters" / "adapter_model.safetensors").is_file()
    assert saves == [5, 10, 12]  # every checkpoint_every steps, and at the end

    with RunStore(db) as store:
        (run,) = store.list_runs()
        rows = store.rounds(run.run_id)
        clients = store.client_runs(run.run_id)
    assert run.kind == "split" and run.status == "finished"
    assert [r.round for r in rows] == list(range(1, 13))
    assert [r.test_accuracy is not None for r in rows].count(True) == 2
    assert sum(r.bytes_up for r in rows) == summary["bytes_up"]
    assert json.loads(rows[0].metrics_json)["codec"] == "lowrank-int8:8"
    assert sorted({c.client for c in clients}) == [0, 1]


def test_through_a_lossless_codec_the_uncompressed_accuracy_is_the_same(
    onnx_bottom: Path, sst2_dir: Path, encoder: BertModel, tmp_path: Path
) -> None:
    cfg = split_config(data={"dir": str(sst2_dir), "clients": 2}, train={"steps": 4, "batch_size": 10})
    edge = EdgeEncoder(onnx_bottom, minilm_path(), max_length=16)
    summary = run_split(cfg, tmp_path / "run", tmp_path / "runs.db", edge, CloudTrainer(cfg, encoder))
    assert summary["test_accuracy_uncompressed"] == summary["test_accuracy"]
    assert summary["compression_ratio_unpadded"] == pytest.approx(1.0, abs=0.05)  # fp32: only lengths and labels


def test_the_saved_adapters_and_head_classify_as_the_run_reported(
    onnx_bottom: Path, sst2_dir: Path, encoder: BertModel, tmp_path: Path
) -> None:
    from fedsim.data.sst2 import load_sst2
    from fedsim.split.inference import SplitClassifier

    cfg = split_config(data={"dir": str(sst2_dir), "clients": 2}, train={"steps": 8, "batch_size": 10, "lr": 5e-3})
    edge = EdgeEncoder(onnx_bottom, minilm_path(), max_length=16)
    summary = run_split(cfg, tmp_path / "run", tmp_path / "runs.db", edge, CloudTrainer(cfg, encoder))
    test = load_sst2(sst2_dir, "test")
    classifier = SplitClassifier(tmp_path / "run" / "adapters", max_length=16)  # as the docs show it
    predicted = classifier.predict(test.texts)
    accuracy = sum(int(p == y) for p, y in zip(predicted, test.labels, strict=True)) / len(test)
    assert abs(accuracy - summary["test_accuracy_uncompressed"]) <= 1 / len(test)  # ONNX and torch bottoms
