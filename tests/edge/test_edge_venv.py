"""An edge device installed by role: ``pip install ".[edge]"`` has no torch, and trains against ``fedsim serve``.

CI builds that virtual environment (``.ci/run``: ``pip install -c constraints.txt ".[edge]"`` into a fresh
venv) and names it in ``FEDSIM_EDGE_VENV``; without it this test skips. The server runs from the test's own
environment, the edge from the torch-free one, with a bottom exported beforehand (an edge cannot export).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from edge.onnx_bottom import tokenizer_beside
from fedsim.split.model import minilm_path
from tests.server.test_split_loopback import FEDSIM, _write

VENV = os.environ.get("FEDSIM_EDGE_VENV")
pytestmark = pytest.mark.skipif(not VENV, reason="FEDSIM_EDGE_VENV names no edge-only virtual environment")


def test_the_edge_extra_installs_no_torch_and_trains_against_a_server(tmp_path: Path, onnx_bottom: Path) -> None:
    assert VENV is not None
    python = Path(VENV) / "bin" / "python"
    show = subprocess.run([str(python), "-m", "pip", "show", "torch"], capture_output=True, text=True)
    assert show.returncode != 0 and "not found" in show.stderr.lower()
    for heavy in ("torch", "transformers", "streamlit", "flwr", "plotly"):
        probe = subprocess.run([str(python), "-c", f"import {heavy}"], capture_output=True, text=True)
        assert probe.returncode != 0, f"{heavy} is importable in the edge venv"

    # what `fedsim edge export` hands the device: the bottom and, beside it, the model's tokenizer
    bottom = tmp_path / "bottom.onnx"
    shutil.copyfile(onnx_bottom, bottom)
    shutil.copyfile(minilm_path() / "tokenizer.json", tokenizer_beside(bottom))
    cfg = _write(tmp_path, bottom)
    out = tmp_path / "cloud"
    serve = subprocess.Popen(
        [*FEDSIM, "serve", str(cfg), "--out", str(out), "--db", str(tmp_path / "runs.db")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        assert line.startswith("serving loopback on 127.0.0.1:"), line
        address = line.split()[3]
        args = ["edge", "run", str(cfg), "--server", address, "--device", "edge-0"]
        args += ["--token-file", str(tmp_path / "edge0.token"), "--data", str(tmp_path / "edge0.tsv")]
        args += ["--onnx", str(bottom), "--set", "codec=lowrank-int8:4"]
        edge = subprocess.run([str(python), "-m", "fedsim.cli", *args], capture_output=True, text=True, timeout=300)
        assert edge.returncode == 0, edge.stderr
        report = json.loads(edge.stdout.strip().splitlines()[-1])
        # without --onnx the edge would have to export the bottom, which needs torch: one clear line, exit 2
        no_onnx = subprocess.run(
            [str(python), "-m", "fedsim.cli", *args[:-4], "--steps", "1"], capture_output=True, text=True, timeout=120
        )
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=120)
    assert report["steps"] == 8 and report["compression_ratio"] > 10
    assert all(0 < loss < 10 for loss in report["losses"])  # tensorly's low-rank codec ran on the edge, no torch
    assert no_onnx.returncode == 2
    assert "fedsim: error: exporting the bottom needs torch" in no_onnx.stderr
    assert json.loads((out / "summary.json").read_text())["steps"] == 8
