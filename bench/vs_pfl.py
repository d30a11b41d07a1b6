"""fedsim against pfl-research (Apple's simulator, arXiv 2404.06430) on pfl's own benchmark shapes, side by side.

Each framework runs each workload of bench/pfl_shapes.py in a fresh process, in turn (fedsim, pfl, fedsim, ...),
``--repeats`` times: the same synthetic data (synthetic images of the benchmark's shape: enough for speed, and
no download), the same model and initialisation, the same local and central optimisers, every user weighted
alike, no evaluation. Seconds per round are the median of the rounds after the first (a round's first steps
warm the allocator and oneDNN's kernels), then the median over repeats; ``wall_s`` is the whole process, from
before torch is imported to the end of training. Threads: ``default`` leaves each framework its own choice
(fedsim's rule; pfl takes torch's default, every core), and each number in ``--threads`` sets both to it.
Each number in ``--processes`` runs both as that many processes of one thread each, started by torchrun (fedsim's
device pool, ``devices: P``, its ranks' sums joined by one all-reduce a round; pfl's distributed simulation,
which splits the cohort among its workers the same way): the machine's cores as devices, on both sides.
One JSON line per (workload, threads setting), with ``speedup = pfl / fedsim`` seconds per round, the round's
arithmetic (a local step counted by fedsim's FLOP counter, times the round's steps) and each framework's rate
as a share of the machine's peak (fp32 2048x2048 matrix products at the same threads). ``--accelerator cuda``
runs both on the GPU and names it.

pfl goes into its own virtual environment, created the first time from the package registry
(``pip install "pfl[pytorch]==0.6.0" torch==2.13.0``) under ``--venv`` (default ~/.cache/fedsim/pfl-0.6.0),
never into fedsim's. Where no registry can be reached (a GPU machine), ``--pfl-python`` names an interpreter
that imports pfl, and ``--pfl-path`` a folder put first on pfl's path alone (pfl installed there with
``pip install --target``). ``--tiny`` runs every workload at a few users of two batches (bench/gpu.py's smoke).

    python bench/vs_pfl.py [--workloads cifar10 stackoverflow femnist] [--rounds 4] [--repeats 3] [--threads 1 2]
                           [--processes 2] [--accelerator cpu] [--pfl-python PYTHON] [--pfl-path DIR] [--tiny]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

started = time.perf_counter()

HERE = Path(__file__).resolve().parent
PFL = "pfl[pytorch]==0.6.0"
VENV = Path.home() / ".cache" / "fedsim" / "pfl-0.6.0"


def pfl_python(venv: Path) -> Path:
    """The pfl environment's interpreter, creating the environment the first time."""
    python = venv / "bin" / "python"
    if python.exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", PFL, "torch==2.13.0"], check=True)
    return python


def fedsim_worker(workload: str, rounds: int, threads: int | None, accelerator: str, out: Path | None) -> None:
    """fedsim's side, in this fresh process: the workload as ``Simulation`` runs it, one line of JSON (from the
    first rank, when torchrun started several: they share ``out``)."""
    import numpy as np
    import torch

    from fedsim import Simulation
    from fedsim.data.base import ArrayDataset, ClientData
    from fedsim.sim.runtime.pool import join_torchrun, leave

    pool = join_torchrun()  # the group Simulation joins too; one process: a pool of one

    sys.path.insert(0, str(HERE))
    from pfl_shapes import MODELS, shape_of, synthetic

    shape = shape_of(workload)
    x, y = synthetic(shape)
    parts = [np.arange(*shape.user_rows(u)) for u in range(shape.users)]
    test = ClientData(torch.from_numpy(x[:10]), torch.from_numpy(y[:10]))
    dataset = ArrayDataset(x, y, parts, test, num_classes=shape.classes)
    central: dict[str, Any] = {"kind": "sgd", "lr": shape.central_lr}
    if shape.central == "adam":
        central = {"kind": "fedadam", "lr": shape.central_lr, "beta2": 0.99, "tau": shape.adaptivity}
    tree: dict[str, Any] = {
        "name": f"vs-pfl-{workload}",
        "seed": 0,
        "rounds": rounds,
        "clients_per_round": shape.cohort,
        "eval_every": 0,
        "progress": False,
        "accelerator": accelerator,
        "task": {"kind": "language_model" if shape.tokens else "classification"},
        "server_optimizer": central,
        "algorithm": {
            "kind": "fedavg",
            "lr": shape.local_lr,
            "local_epochs": shape.epochs,
            "batch_size": shape.batch,
            "weighting": "uniform",
        },
    }
    if threads is not None:
        tree["threads"] = threads
    if pool.world > 1:
        tree["devices"] = pool.world
    laps: list[float] = []

    def lap(sim: Simulation, result: object) -> None:
        laps.append(time.perf_counter())

    with tempfile.TemporaryDirectory() as tmp:
        where = out or Path(tmp)
        sim = Simulation(
            tree, model=MODELS[workload](shape), data=dataset, callbacks=[lap], out=where / "out", db=where / "runs.db"
        )
        laps.append(time.perf_counter())  # the first round's lap includes building the run, as pfl's does
        sim.run()
    leave(together=True)
    round_s = [b - a for a, b in itertools.pairwise(laps)]
    line = {"framework": "fedsim", "workload": workload, "threads": torch.get_num_threads(), "round_s": round_s}
    if pool.is_root:
        print(json.dumps({**line, "processes": pool.world, "wall_s": time.perf_counter() - started}), flush=True)


def round_flops(workload: str) -> float:
    """The arithmetic of one round: a local step's FLOPs (fedsim's count: three forwards of one sample, by
    torch's FlopCounterMode, times the batch) times the round's steps."""
    import torch

    from fedsim.sim.executors.threads import step_flops

    sys.path.insert(0, str(HERE))
    from pfl_shapes import MODELS, shape_of

    shape = shape_of(workload)  # one input of the shape (the count depends on nothing else): not the whole data set
    sample = torch.ones((1, *shape.input_shape), dtype=torch.long if shape.tokens else torch.float32)
    flops = step_flops(MODELS[workload](shape), sample, shape.batch)
    return (flops or 0.0) * shape.steps_per_round()


def device_name(accelerator: str) -> str:
    import platform

    import torch

    if accelerator == "cuda":
        return str(torch.cuda.get_device_name())
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def matmul_peak(threads: int | None, accelerator: str) -> float:
    """This machine's fp32 rate in GFLOP/s on 2048x2048 matrix products (median of 5 after one warm-up) at
    ``threads`` (None: torch's default)."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    device = torch.device("cuda" if accelerator == "cuda" else "cpu")
    a, b = torch.randn(2048, 2048, device=device), torch.randn(2048, 2048, device=device)
    times = []
    for _ in range(6):
        t0 = time.perf_counter()
        torch.mm(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return 2 * 2048**3 / statistics.median(times[1:]) / 1e9


def measure(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    lines = [text for text in done.stdout.splitlines() if text.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{command[:3]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return dict(json.loads(lines[-1]))


def steady(round_s: list[float]) -> float:
    return statistics.median(round_s[1:] if len(round_s) > 1 else round_s)


def commands(
    workload: str, args: argparse.Namespace, python: Path, threads: int | None, processes: int, scratch: Path
) -> dict[str, list[str]]:
    """Each framework's command line for one run: one process, or ``processes`` started by torchrun (whose
    fedsim ranks share the directory ``scratch``)."""
    fedsim = [__file__, "--worker", "fedsim", "--workloads", workload, "--accelerator", args.accelerator]
    fedsim += ["--rounds", str(args.rounds)] + ([] if threads is None else ["--worker-threads", str(threads)])
    pfl = [str(HERE / "pfl_worker.py"), workload, str(args.rounds)] + ([] if threads is None else [str(threads)])
    if processes == 1:
        return {"fedsim": [sys.executable, *fedsim], "pfl": [str(python), *pfl]}
    torchrun = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
    return {
        "fedsim": [sys.executable, *torchrun, *fedsim, "--worker-out", str(scratch)],
        "pfl": [str(python), *torchrun, *pfl],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["cifar10", "stackoverflow", "femnist"])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", nargs="*", type=int, default=[1, os.cpu_count() or 1])
    parser.add_argument("--venv", type=Path, default=VENV)
    parser.add_argument("--processes", nargs="*", type=int, default=[], help="also run both as P processes")
    parser.add_argument("--accelerator", choices=["cpu", "cuda"], default="cpu", help="both frameworks on it")
    parser.add_argument("--pfl-python", type=Path, default=None, help="an interpreter that imports pfl")
    parser.add_argument("--pfl-path", type=Path, default=None, help="a folder first on pfl's path alone")
    parser.add_argument("--tiny", action="store_true", help="a few users of two batches: a smoke run")
    parser.add_argument("--worker", choices=["fedsim"], help=argparse.SUPPRESS)
    parser.add_argument("--worker-threads", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        fedsim_worker(args.workloads[0], args.rounds, args.worker_threads, args.accelerator, args.worker_out)
        return
    python = args.pfl_python or pfl_python(args.venv)
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    if args.tiny:
        env["FEDSIM_TINY"] = os.environ["FEDSIM_TINY"] = "1"  # read by pfl_shapes.shape_of, here and in workers
    if args.accelerator == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # pfl takes a GPU whenever it sees one
    device = device_name(args.accelerator)
    pfl_env = dict(env)
    if args.pfl_path is not None:
        pfl_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(args.pfl_path), env["PYTHONPATH"]) if p)
    cores = os.cpu_count() or 1
    peaks = {threads: matmul_peak(threads, args.accelerator) for threads in {cores, *args.threads}}
    settings: list[tuple[int | None, int]] = [(None, 1), *((t, 1) for t in args.threads)]
    settings += [(1, p) for p in args.processes]  # (threads per process, processes)
    for workload in args.workloads:
        work = round_flops(workload)
        for threads, processes in settings:
            peak = peaks[cores if threads is None else min(cores, threads * processes)]
            runs: dict[str, list[dict[str, Any]]] = {"fedsim": [], "pfl": []}
            for _ in range(args.repeats):
                with tempfile.TemporaryDirectory(prefix="vs-pfl-") as scratch:  # each run's, removed after it
                    for framework, command in commands(
                        workload, args, python, threads, processes, Path(scratch)
                    ).items():
                        runs[framework].append(measure(command, pfl_env if framework == "pfl" else env))
            per_round = {k: statistics.median(steady(r["round_s"]) for r in v) for k, v in runs.items()}
            wall = {k: statistics.median(r["wall_s"] for r in v) for k, v in runs.items()}
            line = {
                "bench": "vs_pfl",
                "workload": workload,
                "device": device,
                "threads": "default" if threads is None else threads,
                "processes": processes,
                "fedsim_threads": runs["fedsim"][0]["threads"],
                "pfl_threads": runs["pfl"][0]["threads"],
                "rounds": args.rounds,
                "repeats": args.repeats,
                "fedsim_round_s": round(per_round["fedsim"], 3),
                "pfl_round_s": round(per_round["pfl"], 3),
                "speedup": round(per_round["pfl"] / per_round["fedsim"], 3),
                "round_gflop": round(work / 1e9, 1),
                "peak_gflops": round(peak, 1),
                "fedsim_share_of_peak": round(work / per_round["fedsim"] / 1e9 / peak, 3),
                "pfl_share_of_peak": round(work / per_round["pfl"] / 1e9 / peak, 3),
                "fedsim_wall_s": round(wall["fedsim"], 2),
                "pfl_wall_s": round(wall["pfl"], 2),
                "fedsim_round_s_each": [round(steady(r["round_s"]), 3) for r in runs["fedsim"]],
                "pfl_round_s_each": [round(steady(r["round_s"]), 3) for r in runs["pfl"]],
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
