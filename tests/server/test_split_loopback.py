"""End to end on loopback: ``fedsim serve`` and ``fedsim edge run`` processes, one with a wrong token."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
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


@pytest.mark.slow
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


def _line(proc: subprocess.Popen[str], needle: str) -> str:
    """Read ``proc``'s stdout up to a line containing ``needle``."""
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, f"ended before {needle!r}: " + (proc.stderr.read() if proc.stderr else "")
        if needle in line:
            return line


@pytest.mark.slow
def test_devices_come_and_go_a_backup_takes_over_and_the_server_finishes_its_steps(
    tmp_path: Path, onnx_bottom: Path
) -> None:
    import numpy as np
    import peft
    from safetensors.numpy import load_file

    from edge.client import EdgeSession
    from fedsim.split.model import load_encoder
    from fedsim.wire import split_pb2
    from tests.split_fixtures import write_sst2

    tokens = {d: f"secret-token-of-{d}-0123456789" for d in ("edge-0", "edge-1", "edge-2", "watch")}
    (tmp_path / "tokens.txt").write_text("".join(f"{d} {t}\n" for d, t in tokens.items()))
    for d, t in tokens.items():
        (tmp_path / f"{d}.token").write_text(t + "\n")
    rows = [(s, 1) for s in POSITIVE] + [(s, 0) for s in NEGATIVE]
    (tmp_path / "own.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows))
    budget = 150
    config = {
        "name": "come-and-go",
        "threads": 1,
        "model": {"split_layer": 5, "max_length": 16},
        "data": {"dir": str(write_sst2(tmp_path / "sst2")), "clients": 1},  # one partition: edge-1's
        "train": {"steps": 1000, "batch_size": 4, "lr": 0.005, "checkpoint_every": 10},
        "server": {
            "address": "127.0.0.1:0",
            "tokens": str(tmp_path / "tokens.txt"),
            "max_steps": budget,
            "retry_after_s": 0.2,
        },
    }
    cfg = tmp_path / "split.yaml"
    cfg.write_text(yaml.safe_dump(config))
    out, db = tmp_path / "cloud", tmp_path / "runs.db"
    serve = subprocess.Popen(
        [*FEDSIM, "serve", str(cfg), "--out", str(out), "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def edge(device: str, *where: str) -> subprocess.Popen[str]:
        args = ["edge", "run", str(cfg), "--server", address, "--device", device]
        args += ["--token-file", str(tmp_path / f"{device}.token"), "--onnx", str(onnx_bottom), *where]
        return subprocess.Popen([*FEDSIM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    try:
        address = _line(serve, "serving come-and-go on").split()[3]
        own = edge("edge-0", "--data", str(tmp_path / "own.tsv"))
        holder = edge("edge-1", "--client", "0")
        for proc in (holder, own):  # edge-1 trains partition 0, edge-0 its own data, and both stall at once,
            _line(proc, "server step")  # so that the budget outlasts edge-2's start ...
            proc.send_signal(signal.SIGSTOP)
        backup = edge("edge-2", "--backup")
        _line(backup, "every partition has a device")  # ... edge-2 waits in the backup pool ...
        holder.send_signal(signal.SIGKILL)  # ... edge-1 dies mid-stream ...
        holder.communicate(timeout=30)
        own.send_signal(signal.SIGCONT)
        reports = {}
        for name, proc in (("edge-0", own), ("edge-2", backup)):  # ... edge-2 takes over; both train to the end
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == 0, stderr
            reports[name] = json.loads(stdout.strip().splitlines()[-1])
        with EdgeSession(address, "watch", tokens["watch"], 16) as watcher:
            watcher.open(role=split_pb2.OBSERVE)
            status = watcher.status()
    finally:
        serve.send_signal(signal.SIGTERM)
        serve_out, serve_err = serve.communicate(timeout=120)
    assert serve.returncode == 0, serve_err
    assert status.step == budget and status.max_steps == budget
    assert (status.joins, status.lost, status.takeovers) == (3, 1, 1)
    takeover = next(e for e in status.events if e.kind == "takeover")
    assert (takeover.device, takeover.partition) == ("edge-2", 0)
    trained = {d.device: d.batches for d in status.devices}
    assert trained["edge-1"] >= 1 and trained["edge-2"] >= 1 and sum(trained.values()) == budget
    assert reports["edge-2"]["partition"] == 0 and reports["edge-2"]["skipped"] == trained["edge-1"]
    assert reports["edge-0"]["finished_by_server"] and reports["edge-2"]["finished_by_server"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == budget
    assert summary["membership"] == {"joins": 3, "leaves": 2, "lost": 1, "takeovers": 1, "active": 0, "standby": 0}
    assert "2 leaves" in serve_out
    assert "1 lost" in serve_out and "1 takeovers" in serve_out
    with RunStore(db) as store:
        (run,) = store.list_runs()
        kinds = [m.kind for m in store.members(run.run_id)]
    assert kinds.count("join") == 3 and kinds.count("lost") == 1 and kinds.count("standby") == 1
    saved = load_file(str(out / "adapters" / "adapter_model.safetensors"))
    assert saved and all(np.isfinite(v).all() for v in saved.values())
    model = peft.PeftModel.from_pretrained(load_encoder(), out / "adapters")
    loaded = {n: p for n, p in model.named_parameters() if "lora_" in n}
    assert loaded and all(p.isfinite().all() for p in loaded.values())
