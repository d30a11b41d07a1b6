"""End to end on loopback: ``fedsim serve`` and ``fedsim edge run`` processes, one with a wrong token."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import yaml

from fedsim.runstore import RunStore
from tests.split_fixtures import NEGATIVE, POSITIVE

FEDSIM = [sys.executable, "-m", "fedsim.cli"]


def _write(tmp: Path, onnx: Path) -> Path:
    for k in (0, 1):  # each device has its own sentences
        rows = [(s, 1) for s in POSITIVE[k::2]] + [(s, 0) for s in NEGATIVE[k::2]]
        (tmp / f"edge{k}.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows * 3))
        (tmp / f"edge{k}.token").write_text(f"secret-token-of-edge-{k}-0123456789\n")
    (tmp / "wrong.token").write_text("not-the-token-of-edge-1-at-all\n")
    (tmp / "tokens.txt").write_text("".join(f"edge-{k} secret-token-of-edge-{k}-0123456789\n" for k in (0, 1)))
    config = {
        "name": "loopback",
        "threads": 1,
        "model": {"split_layer": 5, "max_length": 16},
        "train": {"steps": 8, "batch_size": 6, "lr": 0.005, "checkpoint_every": 4},
        "server": {"address": "127.0.0.1:0", "tokens": str(tmp / "tokens.txt")},
    }
    path = tmp / "split.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _edge(cfg: Path, tmp: Path, onnx: Path, address: str, device: str, token: str, data: str) -> subprocess.Popen[str]:
    args = ["edge", "run", str(cfg), "--server", address, "--device", device, "--token-file", str(tmp / token)]
    args += ["--data", str(tmp / data), "--onnx", str(onnx)]
    return subprocess.Popen([*FEDSIM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_edges_train_and_a_wrong_token_is_refused(tmp_path: Path, onnx_bottom: Path) -> None:
    cfg = _write(tmp_path, onnx_bottom)
    out, db = tmp_path / "cloud", tmp_path / "runs.db"
    serve = subprocess.Popen(
        [*FEDSIM, "serve", str(cfg), "--out", str(out), "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        assert line.startswith("serving loopback on 127.0.0.1:"), line + serve.stderr.read()  # type: ignore[union-attr]
        address = line.split()[3]
        edges = [
            _edge(cfg, tmp_path, onnx_bottom, address, f"edge-{k}", f"edge{k}.token", f"edge{k}.tsv") for k in (0, 1)
        ]
        assert edges[0].stdout is not None
        first = edges[0].stdout.readline()  # edge-0 is training ...
        assert "server step" in first, first + edges[0].stderr.read()  # type: ignore[union-attr]
        intruder = _edge(cfg, tmp_path, onnx_bottom, address, "edge-1", "wrong.token", "edge1.tsv")
        _, err = intruder.communicate(timeout=120)
        assert intruder.returncode == 2
        assert "UNAUTHENTICATED" in err and "unknown device or wrong token" in err
        reports = []
        for edge in edges:  # ... and both go on to the end
            stdout, stderr = edge.communicate(timeout=300)
            assert edge.returncode == 0, stderr
            reports.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        serve.send_signal(signal.SIGTERM)
        serve_out, serve_err = serve.communicate(timeout=120)
    assert serve.returncode == 0, serve_err
    for report in reports:
        assert report["steps"] == 8
        losses = report["losses"]
        assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3, losses  # loss goes down
        assert report["compression_ratio"] > 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 16 and summary["rejected"] == 0
    assert set(summary["devices"]) == {"edge-0", "edge-1"}
    assert (out / "adapters" / "adapter_config.json").is_file()
    assert "stopped after 16 steps" in serve_out
    with RunStore(db) as store:
        (run,) = store.list_runs()
        assert run.status == "finished" and run.kind == "split"
        rows = store.rounds(run.run_id)
    assert len(rows) == 16
    # the cloud's idea of each batch's fp32 size (for the dashboard) matches what the edges measured
    dense = sum(json.loads(r.metrics_json)["bytes_uncompressed"] for r in rows)
    assert dense == sum(report["bytes_uncompressed"] for report in reports)
