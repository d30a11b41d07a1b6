"""Client-state memory: one round of SCAFFOLD over 10,000 clients with the disk state store.

Each client keeps a control variate the size of the W1 model (MLP 784-128-10, 101,770 floats = 407 KB), so
10,000 clients hold about 4 GB of state; with the disk backend and its byte-bounded LRU cache, resident memory
must stay flat in the number of clients. Every population size runs in its own process so that each peak RSS
(``ru_maxrss``) is its own. Data is generated per client on access (``lazy``) so it does not grow either.

``--variant adam`` adds the client's Adam moments to its state (``client_optimizer: {kind: adam, state: client}``,
three times the state); ``--variant topk`` adds its top-k error-feedback residual (a fixed top-k knob of 10%).
``in_flight_peak_mb`` is the most client state a round held outside the store (``state.in_flight`` bounds it).

    python bench/state_memory.py [--clients 1000 10000] [--cache-mb 64] [--variant scaffold|adam|topk]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from sim_throughput import w1_config

from fedsim.config import parse_config
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.summary import peak_rss_mb

VARIANTS: dict[str, dict[str, Any]] = {
    "scaffold": {},
    "adam": {"algorithm": {"lr": 0.001, "client_optimizer": {"kind": "adam", "state": "client"}}},
    "topk": {"control": {"kind": "none", "knob": {"name": "topk", "ladder": [0.1]}}},
}


def one_round(clients: int, cache_mb: float, workdir: Path, variant: str) -> dict[str, float]:
    extra = VARIANTS[variant]
    tree = w1_config(clients, 1, lazy=True)
    tree["algorithm"].update(kind="scaffold", **extra.get("algorithm", {}))
    state = {"backend": "disk", "dir": str(workdir / "state"), "cache_mb": cache_mb}
    control = {"control": extra["control"]} if "control" in extra else {}
    cfg = parse_config({**tree, "name": f"state-{clients}", "state": state, **control})
    engine = Engine(cfg, out_dir=workdir / "out", db_path=workdir / "fedsim.db")
    t0 = time.perf_counter()
    engine.round(0)
    engine.store.flush()
    seconds = time.perf_counter() - t0
    disk = engine.store.disk_bytes()
    write_back = engine.executor.write_back  # type: ignore[attr-defined]
    engine.close()
    return {
        "clients": clients,
        "round_s": round(seconds, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "state_disk_mb": round(disk / 2**20, 1),
        "in_flight_peak_mb": round(write_back.peak_bytes / 2**20, 2),
        "in_flight_bound_mb": round(write_back.bound_bytes / 2**20, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--cache-mb", type=float, default=64.0)
    parser.add_argument("--variant", choices=sorted(VARIANTS), default="scaffold")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.child:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(one_round(args.clients[0], args.cache_mb, Path(tmp), args.variant)))
        return
    results = []
    for n in args.clients:
        cmd = [sys.executable, __file__, "--child", "--clients", str(n), "--cache-mb", str(args.cache_mb)]
        cmd += ["--variant", args.variant]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    first, last = results[0], results[-1]
    print(
        json.dumps(
            {
                "bench": "state_memory",
                "algorithm": "scaffold",
                "variant": args.variant,
                "backend": "disk",
                "cache_mb": args.cache_mb,
                "runs": results,
                **{f"peak_rss_mb_{r['clients']}": r["peak_rss_mb"] for r in results},
                "rss_ratio": round(last["peak_rss_mb"] / first["peak_rss_mb"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
