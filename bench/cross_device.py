"""The cross-device example (examples/cross_device.yaml) at its StackOverflow population and at 1,000 clients.

Each population runs ``--rounds`` rounds of the example in its own process (peak RSS is its own): 50 clients a
round generated when they train, the next-word LSTM, FedAdam. ``round_s`` is the median round after the first
(which warms up), ``peak_rss_mb`` the process's, ``perplexity`` the test perplexity after the last round.

    python bench/cross_device.py [--populations 1000 342477] [--rounds 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from fedsim.config import parse_config
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.summary import peak_rss_mb

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "cross_device.yaml"


def rounds_of(population: int, rounds: int, workdir: Path) -> dict[str, float]:
    tree = yaml.safe_load(EXAMPLE.read_text())
    tree["data"]["clients"] = population
    tree.update(rounds=rounds, eval_every=rounds, progress=False, name=f"cross-device-{population}")
    engine = Engine(parse_config(tree), out_dir=workdir / "out", db_path=workdir / "fedsim.db")
    seconds, samples = [], []
    for r in range(rounds):
        t0 = time.perf_counter()
        row = engine.round(r)
        seconds.append(time.perf_counter() - t0)
        samples.append(row.samples)
    engine.close()
    assert engine.last_eval is not None
    return {
        "round_s": round(statistics.median(seconds[1:]), 3),
        "samples_per_round": round(statistics.mean(samples), 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "perplexity": round(engine.last_eval.metrics()["perplexity"], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--populations", type=int, nargs="+", default=[1000, 342_477])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        torch.set_num_threads(1)
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(rounds_of(args.child, args.rounds, Path(tmp))))
        return
    for population in args.populations:
        cmd = [sys.executable, __file__, "--child", str(population), "--rounds", str(args.rounds)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
        print(json.dumps({"bench": "cross_device", "population": population, "clients_per_round": 50, **result}))


if __name__ == "__main__":
    main()
