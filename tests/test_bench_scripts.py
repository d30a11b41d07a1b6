"""Every benchmark script runs at a tiny size and prints its JSON line, so that an API change cannot leave one
broken unnoticed. The sizes say nothing about speed: the figures come from the full runs (docs/benchmarks.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
SHARED = ROOT.parent / "shared" / "data"
PFL_VENV = Path.home() / ".cache" / "fedsim" / "pfl-0.6.0"  # bench/vs_pfl.py's, made by its first full run

# script: its smallest arguments, and the data it needs (None: none beyond the repository's)
TINY: dict[str, tuple[str, str | None]] = {
    "async": ("--part population --populations 1000 --steps 2 --repeats 1", None),
    "auto_executor": ("--sides 8 --threads 1 --groups 8 --repeats 1", None),
    "checkpoint_overhead": ("--rounds 2 --repeats 1", None),
    "compressors": ("--workloads mnist --settings dense topk_1% --seeds 0 --rounds 1", "mnist"),
    "cross_device": ("--populations 1000 --rounds 2", None),
    "decentralised": (
        "--workloads quickstart --graphs ring --batches 16 --algorithms dpsgd --seeds 0 --rounds 2 --nodes 4"
        " --parts gossip",
        None,
    ),
    "eva": ("--seeds 0 --rounds 1", None),
    "fused": ("--workloads W1 --clients 20 --rounds 1 --repeats 1 --group 10", None),
    "gather_cost": ("--clients 24 --numel 1000 --repeats 1", None),
    "lora_fa_memory": ("--quick --steps 2", "sst2"),
    "mcmahan": ("--tiny", "mnist"),
    "mnist": ("--rounds 1 --per-round 2", "mnist"),
    "norm_skew": ("--rounds 1 --local-steps 1 --partitions 2 --seeds 0", None),
    "own_model": ("--clients 2 --samples 8 --rounds 1 --repeats 1", None),
    "peft_costs": ("--tiny --repeats 1 --rounds 1", None),
    "population": ("--populations 1000 --rounds 1 --repeats 1", None),
    "privacy": ("--rounds 2 --epsilons 8 --canaries 2 --population 1000 --noise-cohort 50", "mnist"),
    "robust": ("--dataset digits --rounds 1 --fraction 0.1 --attacks alie --aggregators median", None),
    "scaling": ("--clients 10 --rounds 1 --repeats 1", None),
    "scheduler": ("--rounds 2 --clients 20 --cohort 10 --repeats 1", None),
    "secagg": ("--rounds 1", "mnist"),
    "selection": ("--rounds 2 --seeds 0 --cohort 5 --candidates 10 --no-oort", None),
    "selection_exposure": ("--rounds 2 --seeds 0 --cohort 5 --candidates 10 --clients 20", None),
    "sim_throughput": ("--clients 20 --rounds 1 --repeats 1", None),
    "skewscout": ("--budget 20 --loose 4 --probe-every 2 --skews 0.2 --seeds 0", None),
    "split_sst2": ("--quick --steps 2 --codecs fp32 --seeds 0", "sst2"),
    "state_memory": ("--clients 100", None),
    "sweep": ("--repeats 1 --measure-rounds 1", None),
    "threads": ("--rounds 1 --repeats 1", None),
    "vs_flower": ("--clients 10 --rounds 1 --repeats 1", None),
    "vs_pfl": ("--tiny --workloads femnist --rounds 1 --repeats 1 --threads 1", "pfl"),
}
# scripts that read another's output, run after it on that output
READERS = {"frontier": "compressors", "robust_table": "robust"}
# scripts another test runs at a tiny size already
COVERED = {"gpu": "tests/sim/test_gpu_table.py", "gpu_wheels": "tests/sim/test_gpu_table.py"}
# modules the scripts import or start, not scripts of their own
LIBRARIES = {"gpu_adapters", "gpu_checks", "gpu_fused", "mnist_tree", "pfl_shapes", "pfl_worker"}


def test_every_bench_script_is_smoke_tested_or_named_a_library() -> None:
    scripts = {path.stem for path in BENCH.glob("*.py")}
    listed = set(TINY) | set(READERS) | set(COVERED) | LIBRARIES
    assert scripts == listed, scripts ^ listed
    assert all((ROOT / test).is_file() for test in COVERED.values())


def _run(name: str, args: list[str], cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"bench/{name}.py {' '.join(args)}: {done.stderr[-3000:]}"
    return done.stdout


def _needs(data: str | None) -> None:
    if data == "pfl" and not (PFL_VENV / "bin" / "python").exists():
        pytest.skip(f"pfl-research's environment {PFL_VENV} is made by bench/vs_pfl.py's first full run")
    if data in ("mnist", "sst2") and not (SHARED / data).is_dir():
        pytest.skip(f"needs ../shared/data/{data}")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TINY))
def test_the_bench_script_runs_at_a_tiny_size_and_prints_json(name: str, tmp_path: Path) -> None:
    args, data = TINY[name]
    _needs(data)
    work = tmp_path / "work"  # the scripts' ../shared/data, as from the repository's root
    work.mkdir()
    (tmp_path / "shared").symlink_to(ROOT.parent / "shared", target_is_directory=True)
    out = _run(name, args.split(), work)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, f"bench/{name}.py printed no JSON line: {out[-2000:]}"
    for line in lines:
        assert isinstance(json.loads(line), dict)
    for reader, writer in READERS.items():
        if writer == name:
            (tmp_path / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
            extra = [str(tmp_path / "frontier.png")] if reader == "frontier" else []
            _run(reader, [str(tmp_path / f"{name}.jsonl"), *extra], tmp_path)
            if reader == "frontier":
                assert (tmp_path / "frontier.png").stat().st_size > 0
