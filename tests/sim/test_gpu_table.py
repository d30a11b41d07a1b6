"""bench/gpu.py, the GPU table, run on the CPU at tiny sizes so that it works the day a GPU comes: every row
prints one JSON line with the device, versions and commit; the checks pass; bad arguments exit 2; and the GPU
machine's wheels are the versions fedsim is tested with."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "bench" / "gpu.py"


def run_table(command: list[str], env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """``command`` (bench/gpu.py, or bench/gpu.sh, which runs it) at tiny sizes on the CPU: its JSON lines."""
    done = subprocess.run(
        [*command, "--accelerator", "cpu", "--tiny"], capture_output=True, text=True, env=env, check=False, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def assert_whole_table(lines: list[dict[str, Any]], torch_version: str = torch.__version__) -> None:
    assert Counter(line["row"] for line in lines) == {
        "fused": 8,
        "adapters": 2,
        "vs_pfl": 3,
        "population": 2,
        "split": 2,
        "check": 3,
    }
    for line in lines:
        assert line["bench"] == "gpu" and line["accelerator"] == "cpu" and line["tiny"] is True
        assert line["torch"] == torch_version and re.fullmatch(r"[0-9a-f]{7,40}|unknown", line["commit"])
        assert line["device"].endswith("cores") and line["peak_gflops"] > 0
    fused = [line for line in lines if line["row"] == "fused"]
    assert sorted({(line["workload"], line["group"]) for line in fused}) == [
        ("cifar10", 2),
        ("cifar10", 4),
        ("stackoverflow", 2),
        ("stackoverflow", 4),
        ("w1", 2),
        ("w1", 4),
        ("w2", 2),
        ("w2", 4),
    ]
    for line in fused:
        assert line["limit_s"] > 0 and line["fused_s"] > 0 and line["sequential_s"] > 0
        assert line["fused_vs_limit"] == pytest.approx(line["limit_s"] / line["fused_s"], rel=0.03)  # one repeat
    adapters = [line for line in lines if line["row"] == "adapters"]
    assert [line["clients"] for line in adapters] == [2, 4]
    for line in adapters:  # one repeat: the ratio is the two seconds' own
        assert line["fused_vs_sequential"] == pytest.approx(line["sequential_s"] / line["fused_s"], rel=0.03)
        assert line["model_params"] > 0 and line["gflop"] > 0 and line["fused_peak_mb"] is None  # no CUDA here
    pfl = {line["workload"]: line for line in lines if line["row"] == "vs_pfl"}
    assert sorted(pfl) == ["cifar10", "femnist", "stackoverflow"]
    for line in pfl.values():
        assert line["speedup"] == pytest.approx(line["pfl_round_s"] / line["fedsim_round_s"], rel=0.02)
    population = [line for line in lines if line["row"] == "population"]
    assert [line["population"] for line in population] == [100, 10_000] and population[0]["round_ratio"] == 1.0
    split = {line["bottleneck"]: line for line in lines if line["row"] == "split"}
    assert split["off"]["wire_width"] == 384 and split["sft8"]["wire_width"] == 8
    assert all(line["tokens_per_s"] > 0 for line in split.values())
    checks = {line["check"]: line for line in lines if line["row"] == "check"}
    assert sorted(checks) == ["fused_equals_sequential", "host_reads", "resume"]
    assert all(line["ok"] for line in checks.values()), checks
    assert checks["resume"]["values_differing"] == 0


@pytest.mark.slow
def test_the_whole_table_runs_on_the_cpu_at_tiny_sizes() -> None:
    assert_whole_table(run_table([sys.executable, str(GPU)]))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--rows", "fused,speed"],
            r"--rows: unknown speed \(rows: fused, adapters, vs_pfl, population, split, checks\)$",
        ),
        (["--accelerator", "cuda"], "--accelerator cuda: torch .* sees no CUDA device"),
    ],
)
def test_a_bad_argument_exits_2_and_names_it(args: list[str], message: str) -> None:
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    done = subprocess.run([sys.executable, str(GPU), *args], capture_output=True, text=True, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert re.search(message, done.stderr.strip().splitlines()[-1]), done.stderr


def pins(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        match = re.match(r"([A-Za-z0-9_.-]+)==([^\s#]+)", line.strip())
        if match:
            found[match.group(1).lower().replace("_", "-")] = match.group(2)
    return found


def test_the_gpu_wheels_are_the_versions_fedsim_is_tested_with() -> None:
    listed = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_wheels.py"), "--list"], capture_output=True, text=True, check=True
    ).stdout
    wheels, tested = pins(listed), pins((ROOT / "constraints.txt").read_text())
    assert "torch" not in wheels  # the GPU machine's own CUDA torch, never a carried one
    differing = {name: (v, tested[name]) for name, v in wheels.items() if name in tested and tested[name] != v}
    assert differing == {"dp-accounting": ("0.5.1", "0.6.0")}  # pfl 0.6 asks for < 0.6; the table imports it for pfl
    assert {"numpy", "pydantic", "transformers", "scipy", "pfl"} <= set(wheels)


@pytest.mark.slow
def test_the_wheels_install_offline_beside_torch_alone_and_the_table_runs(tmp_path: Path) -> None:
    """FEDSIM_TORCH_ONLY_PYTHON: a Python 3.12 interpreter whose environment holds torch and nothing else (as
    the GPU machine's holds torch and what the wheels shadow). The wheels are built, installed offline by
    bench/gpu.sh into a folder of their own, and the whole table runs there."""
    python = os.environ.get("FEDSIM_TORCH_ONLY_PYTHON")
    if not python:
        pytest.skip("FEDSIM_TORCH_ONLY_PYTHON names no interpreter with torch alone")
    out = tmp_path / "whl"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_wheels.py"), "--out", str(out)], check=True)
    assert (out / "wheels.tar.xz").stat().st_size < 60 * 2**20
    repo = tmp_path / "repo"  # what travels: the tracked files and the wheels, not this environment
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    (repo / ".whl").symlink_to(out)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHON": python, "FEDSIM_SITE": str(tmp_path / "site")}
    lines = run_table(["bash", str(repo / "bench" / "gpu.sh")], env)
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    assert_whole_table(lines, version.stdout.strip())
