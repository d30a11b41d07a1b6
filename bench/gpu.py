"""The GPU table in one command: fused clients, fedsim against pfl-research, a population, the split step and
the checks only a GPU can make, on one accelerator, one JSON line per row.

Every line carries the row's figures and the same header: the device's name, torch's and CUDA's versions, the
commit (``FEDSIM_COMMIT`` or ``git rev-parse``), the date and the command's wall seconds so far. Rows, in order
(``--rows`` picks some):

- ``fused`` (bench/gpu_fused.py): the fused executor at two group sizes and the sequential one against the
  plain torch loop, on W1's MLP, the quickstart's CNN (W2), pfl's CIFAR10 ``simple_cnn`` and its StackOverflow
  transformer; the share of the accelerator's measured fp32 matmul peak.
- ``vs_pfl`` (bench/vs_pfl.py, its own processes): fedsim against pfl-research 0.6 on pfl's CIFAR10, FEMNIST
  and StackOverflow shapes, seconds a round after the first, with each framework's default threads, and on
  CIFAR10 also with both at every core; each with its share of the peak.
- ``adapters`` (bench/gpu_adapters.py): K = 8 and 32 clients' LoRA adapters fused over one frozen base of
  109 M parameters (BERT-base's shape from a config) against the sequential executor over the same base.
- ``population`` (bench/gpu_fused.py): 100 clients a round drawn from 1,000 and from 1,000,000, seconds a
  round and the accelerator's peak memory.
- ``split`` and ``checks`` (bench/gpu_checks.py): the cloud step's tokens a second, the SFT bottleneck off and
  on; resume bit-identical, fused equal to sequential, host reads per round.

Sized for under 8 minutes on one H100 (each row prints as it finishes, so a cut run keeps what it measured).
``--accelerator cpu --tiny`` runs every row at a few clients in under a minute: the CPU smoke the tests run,
so the script works the day a GPU comes. On the GPU machine run ``bash bench/gpu.sh``, which first installs
the wheels ``python bench/gpu_wheels.py`` put in ``.whl/``.

    python bench/gpu.py [--accelerator cuda|cpu] [--tiny] [--rows fused,adapters,vs_pfl,population,split,checks]
        [--repeats N] [--pfl-python PYTHON]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

started = time.perf_counter()

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
ROWS = ("fused", "adapters", "vs_pfl", "population", "split", "checks")
PFL_SITE = Path.home() / ".cache" / "fedsim" / "pfl-0.6.0-site"
# pfl 0.6.0 and what it imports that fedsim's environment does not hold at pfl's versions (bench/gpu_wheels.py
# carries the same to the GPU machine)
PFL_PACKAGES = ["pfl==0.6.0", "multiprocess==0.70.19", "dill==0.4.1", "dp-accounting==0.5.1", "prv-accountant==0.2.0"]


def commit() -> str:
    if os.environ.get("FEDSIM_COMMIT"):
        return os.environ["FEDSIM_COMMIT"]
    try:  # the GPU machine gets the working tree without .git, and may have no git at all
        done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def header(accelerator: str, tiny: bool) -> dict[str, Any]:
    import torch
    from vs_pfl import device_name

    return {
        "bench": "gpu",
        "device": device_name(accelerator),
        "accelerator": accelerator,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "commit": commit(),
        "date": datetime.date.today().isoformat(),
        "tiny": tiny,
    }


def pfl_command() -> list[str]:
    """How vs_pfl.py reaches pfl: this interpreter when it imports pfl (the GPU machine's wheels), else this
    interpreter with pfl's packages in a folder of their own, installed from the registry the first time."""
    if importlib.util.find_spec("pfl") is not None:
        return ["--pfl-python", sys.executable]
    if not (PFL_SITE / "pfl").is_dir():
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(PFL_SITE)]
        subprocess.run([*pip, *PFL_PACKAGES], check=True)
    return ["--pfl-python", sys.executable, "--pfl-path", str(PFL_SITE)]


def vs_pfl_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """bench/vs_pfl.py on the accelerator: every shape at each framework's default threads, CIFAR10 also with
    both at every core; its lines as they are, under this table's header."""
    cores = str(os.cpu_count() or 1)
    runs = [(["cifar10", "femnist", "stackoverflow"], [])]
    if not args.tiny:  # CIFAR10's default and every-core settings in one call, the others' default in another
        runs = [(["cifar10"], [cores]), (["femnist", "stackoverflow"], [])]
    lines = []
    for workloads, threads in runs:
        command = [sys.executable, str(HERE / "vs_pfl.py"), "--accelerator", args.accelerator, "--workloads"]
        command += [*workloads, "--threads", *threads, "--rounds", "2" if args.tiny else "5"]
        command += ["--repeats", "1" if args.tiny else str(args.repeats or 1), *pfl_command()]
        command += ["--tiny"] if args.tiny else []
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"vs_pfl.py failed ({done.returncode}): {done.stderr[-3000:]}")
        for text in done.stdout.splitlines():
            if text.startswith("{"):
                line = json.loads(text)
                lines.append({"row": "vs_pfl", **{k: v for k, v in line.items() if k not in ("bench", "device")}})
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--tiny", action="store_true", help="a few clients a row: the CPU smoke")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {', '.join(ROWS)}")
    parser.add_argument("--repeats", type=int, default=None, help="repeats of the fused and vs_pfl rows")
    args = parser.parse_args()
    rows = args.rows.split(",")
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        parser.error(f"--rows: unknown {', '.join(unknown)} (rows: {', '.join(ROWS)})")
    import torch

    if args.accelerator == "cuda" and not torch.cuda.is_available():
        parser.error(f"--accelerator cuda: torch {torch.__version__} sees no CUDA device (--accelerator cpu?)")
    import gpu_adapters
    import gpu_checks
    import gpu_fused
    from vs_pfl import matmul_peak

    head = header(args.accelerator, args.tiny)
    peak = matmul_peak(None, args.accelerator)
    runners = {
        "fused": lambda: gpu_fused.fused_rows(
            args.accelerator, args.tiny, args.repeats or (1 if args.tiny else 3), peak
        ),
        "adapters": lambda: gpu_adapters.adapter_rows(
            args.accelerator, args.tiny, args.repeats or (1 if args.tiny else 3), peak
        ),
        "vs_pfl": lambda: vs_pfl_rows(args),
        "population": lambda: gpu_fused.population_rows(args.accelerator, args.tiny, 2 if args.tiny else 3),
        "split": lambda: gpu_checks.split_rows(args.accelerator, args.tiny),
        "checks": lambda: gpu_checks.check_rows(args.accelerator, args.tiny),
    }
    for row in rows:
        for line in runners[row]():
            out = {**head, "peak_gflops": round(peak, 1), **line, "wall_s": round(time.perf_counter() - started, 1)}
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
