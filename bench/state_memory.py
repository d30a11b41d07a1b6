"""Client-state memory: one round of SCAFFOLD over 10,000 clients with the disk state store.

Each client keeps a control variate the size of the W1 model (MLP 784-128-10, 101,770 floats = 407 KB), so
10,000 clients hold about 4 GB of state; with the disk backend and its byte-bounded LRU cache, resident memory
must stay flat in the number of clients. Every population size runs in its own process so that each peak RSS
(``ru_maxrss``) is its own. Data is generated per client on access (``lazy``) so it does not grow either.

    python bench/state_memory.py [--clients 1000 10000] [--cache-mb 64]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from fedsim.config import parse_config
from fedsim.sim.engine import Engine, peak_rss_mb


def one_round(clients: int, cache_mb: float, workdir: Path) -> dict[str, float]:
    cfg = parse_config(
        {
            "name": f"state-{clients}",
            "rounds": 1,
            "eval_every": 0,
            "threads": 1,
            "progress": False,
            "data": {
                "dataset": "random",
                "clients": clients,
                "samples_per_client": 64,
                "features": 784,
                "classes": 10,
                "test_samples": 256,
                "lazy": True,
            },
            "model": {"kind": "mlp", "hidden": [128]},
            "algorithm": {"name": "scaffold", "lr": 0.05, "local_epochs": 1, "batch_size": 16},
            "state": {"backend": "disk", "dir": str(workdir / "state"), "cache_mb": cache_mb},
        }
    )
    engine = Engine(cfg, out_dir=workdir / "out", db_path=workdir / "fedsim.db")
    t0 = time.perf_counter()
    engine.round(0)
    engine.store.flush()
    seconds = time.perf_counter() - t0
    disk = engine.store.disk_bytes()
    engine.close()
    return {
        "clients": clients,
        "round_s": round(seconds, 2),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "state_disk_mb": round(disk / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--cache-mb", type=float, default=64.0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.child:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(one_round(args.clients[0], args.cache_mb, Path(tmp))))
        return
    results = []
    for n in args.clients:
        cmd = [sys.executable, __file__, "--child", "--clients", str(n), "--cache-mb", str(args.cache_mb)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    first, last = results[0], results[-1]
    print(
        json.dumps(
            {
                "bench": "state_memory",
                "algorithm": "scaffold",
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
