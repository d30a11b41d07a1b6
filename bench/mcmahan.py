"""McMahan et al. 2017, Table 2 on MNIST: communication rounds to a target test accuracy, FedSGD against FedAvg.

The paper (AISTATS 2017, "Communication-Efficient Learning of Deep Networks from Decentralized Data",
arXiv:1602.05629, Section 3 and Table 2): 100 clients of 600 MNIST training images each, IID or pathological
non-IID (sorted by digit, 200 shards of 300, two shards a client: fedsim's ``shards`` partition), C = 0.1 (10
clients a round), plain SGD on each client; FedSGD is one full-batch gradient step per client per round (E = 1,
B = infinity), FedAvg E local epochs of batch B. Models: the 2NN (784-200-200-10 ReLU, 199,210 parameters,
``mlp`` with ``hidden: [200, 200]``) and the CNN (``fedavg_cnn``, 1,663,370 parameters). The figure is the
first round whose global model reaches 97% (2NN) or 99% (CNN) on the 10,000 test images, evaluated every
round, with the learning rate chosen per setting: for each (model, partition, E, B) the lr of ``--lrs`` that
reaches the target in the fewest rounds, mean over ``--seeds`` (an lr counts only if every seed reaches it).
The paper tunes the lr per setting and reports the best; its grid is not restated here (the paper's text was
not at hand when this was written), so the default grid is this script's choice: ratio 10^(1/3) from 0.01
to 1.

Each (model, partition, row, lr, seed) is one fedsim run in ``--dir`` (default runs/mcmahan/), checkpointed as
it goes. A run ends at the target or at ``--max-rounds`` for its model (then it reads "not reached by N"), or
when it diverges; its outcome (the accuracy curve, the round it reached the target, fedsim's commit) is then
written beside it as ``KEY.json``. Running the same command again skips every run with an outcome, resumes an
unfinished one from its newest checkpoint (``fedsim resume``'s path) and starts the rest, so a killed
background invocation loses at most the rounds since a checkpoint. A run capped at N keeps that outcome when
``--max-rounds`` grows: delete its ``KEY.json`` and ``KEY/`` to run it longer. Runs go seed by seed (a whole
table at seed 0 before seed 1), each outcome's line on stderr as it ends. Prints one JSON line: per row the
paper's rounds and speed-up, fedsim's rounds per seed at the chosen lr with their mean, min and max, its
speed-up over fedsim's FedSGD, the chosen lr and every lr's figures.

Rows (``--rows``; ``all``: every row of the paper's table): ``fedsgd`` and ``E<epochs>-B<batch>`` with
``inf`` for B = infinity (a batch as large as the client: one step an epoch), e.g. ``E1-B10``, ``E5-Binf``;
each model runs the rows its table has. Default: FedSGD, and FedAvg E=1 B=10 for the 2NN, E=5 B=10 for the CNN.

In the background, and again after it is killed (the same command resumes):

    nohup python bench/mcmahan.py --dir runs/mcmahan > runs/mcmahan.jsonl 2> runs/mcmahan.log &
    python bench/mcmahan.py --only 2nn --partitions iid --rows fedsgd E1-B10 --seeds 0 --lrs 0.1 0.2154

``kill PID`` (SIGTERM) stops it after the round under way, checkpointed; a second signal, ``kill -9`` or a
machine that goes away stop it at once, and the next invocation goes on from the newest periodic checkpoint
(``--checkpoint-every``: fedsim's ``auto`` period, at most five minutes of work lost, or the round under way
when one round takes longer). On a CPU the CNN's FedAvg rows are slow (E=5 B=10: 3,000 local steps a round,
about 10 minutes on two shared cores); the runs take the GPU where torch sees one.

``--tiny`` (the smoke test): the 2NN on IID, two clients a round, three rounds, target 50%, one lr and seed.
Needs ../shared/data/mnist (or ``--data``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

TARGET = {"2nn": 0.97, "cnn": 0.99}  # Section 3: the test accuracy Table 2 counts rounds to
MAX_ROUNDS = {"2nn": 2500, "cnn": 1500}  # above every figure of Table 2 (the slowest: 1,817 and 1,000)
MODELS: dict[str, dict[str, Any]] = {"2nn": {"kind": "mlp", "hidden": [200, 200]}, "cnn": {"kind": "fedavg_cnn"}}
PARTITIONS: dict[str, dict[str, Any]] = {"iid": {"kind": "iid"}, "noniid": {"kind": "shards", "labels_per_client": 2}}
LRS = [round(10 ** (k / 3), 4) for k in range(-6, 1)]  # 0.01, 0.0215, 0.0464, 0.1, 0.2154, 0.4642, 1.0
SAMPLES = 600  # every client's training images: 60,000 over 100 clients (u = E * 600 / B)
WHOLE = 60_000  # B = infinity: a batch no client's split exceeds (fedsim takes min(batch, samples))

# Table 2 of McMahan et al. 2017 (arXiv:1602.05629): rounds to 97% (2NN) and 99% (CNN), (IID, non-IID), by
# (E, B), B None for infinity; (1, None) is FedSGD. The paper's speed-ups are FedSGD's rounds over a row's
# (each printed speed-up, 9.4x ... 45.9x and 0.5x ... 34.8x, is that ratio to its one decimal). Written down
# without the paper's PDF at hand: check these 36 figures against it before quoting them.
PAPER: dict[str, dict[tuple[int, int | None], tuple[int, int]]] = {
    "2nn": {
        (1, None): (1468, 1817),
        (10, None): (156, 1100),
        (1, 50): (144, 1183),
        (20, None): (92, 957),
        (1, 10): (92, 831),
        (10, 50): (45, 881),
        (20, 50): (39, 835),
        (10, 10): (34, 497),
        (20, 10): (32, 738),
    },
    "cnn": {
        (1, None): (626, 483),
        (5, None): (179, 1000),
        (1, 50): (65, 600),
        (20, None): (234, 672),
        (1, 10): (34, 350),
        (5, 50): (29, 334),
        (20, 50): (32, 426),
        (5, 10): (20, 229),
        (20, 10): (18, 173),
    },
}
DEFAULT_ROWS = {"2nn": ["fedsgd", "E1-B10"], "cnn": ["fedsgd", "E5-B10"]}
FEDSGD = (1, None)


def row_name(row: tuple[int, int | None]) -> str:
    epochs, batch = row
    return "fedsgd" if row == FEDSGD else f"E{epochs}-B{batch or 'inf'}"


def commit() -> str:
    if os.environ.get("FEDSIM_COMMIT"):
        return os.environ["FEDSIM_COMMIT"]
    try:
        done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def run_key(model: str, partition: str, row: tuple[int, int | None], lr: float, seed: int, target: float) -> str:
    return f"{model}-{partition}-{row_name(row)}-lr{lr:g}-seed{seed}-to{target:g}"


def run_config(
    key: str, model: str, partition: str, row: tuple[int, int | None], lr: float, seed: int, cap: int, args: Any
) -> dict[str, Any]:
    epochs, batch = row
    return {
        "name": key,
        "seed": seed,
        "rounds": cap,
        "clients_per_round": args.per_round,
        "eval_every": 1,
        "threads": args.threads,
        "progress": False,
        "executor": {"kind": args.executor},
        "checkpoint": {"every": args.checkpoint_every},
        "data": {"dataset": "mnist", "dir": str(args.data), "clients": 100, "partition": PARTITIONS[partition]},
        "model": MODELS[model],
        "algorithm": {"kind": "fedavg", "lr": lr, "local_epochs": epochs, "batch_size": batch or WHOLE},
    }


def run_one(key: str, config: dict[str, Any], target: float, root: Path) -> dict[str, Any]:
    """The outcome of run ``key``: read from ``root/KEY.json`` if it ended before; else the run is resumed from
    its newest checkpoint (or started, when it has none) and goes on to the target or its cap."""
    from fedsim import Simulation, read_run
    from fedsim.sim.persist.checkpoint import complete
    from fedsim.sim.persist.diverged import Diverged

    done = root / f"{key}.json"
    if done.is_file():
        return {**json.loads(done.read_text()), "how": "done before"}
    out, db = root / key, root / "runs.db"

    def at_target(sim: Any, result: Any) -> bool:
        return bool(result.metrics.get("test_accuracy", 0.0) >= target)

    how, t0 = "started", time.perf_counter()
    try:
        if (out / "summary.json").is_file():  # ended, its outcome not yet written
            how = "ended before"
        elif (out / "checkpoints").is_dir() and complete(out / "checkpoints"):
            how = "resumed"
            Simulation.resume(out, callbacks=[at_target], db=db).run()
        else:  # never started, or killed before its first checkpoint: from the start
            Simulation(config, callbacks=[at_target], out=out, overwrite=True, db=db).run()
        status = "ended"
    except Diverged:
        status = "diverged"
    history = read_run(out, db)
    curve = [round(float(a), 4) for a in history["test_accuracy"]]
    reached = next((i + 1 for i, a in enumerate(curve) if a >= target), None)
    outcome = {
        "key": key,
        "status": status,
        "reached": reached,
        "rounds_run": len(curve),
        "cap": config["rounds"],
        "best": max(curve, default=None),
        "curve": curve,
        "commit": commit(),
        "how": how,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    done.with_suffix(".tmp").write_text(json.dumps(outcome))
    done.with_suffix(".tmp").replace(done)  # whole or absent: a kill here leaves the run to be read again
    return outcome


def lr_figures(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    """One lr's rounds per seed (None: not reached), and their mean, min and max where every seed reached."""
    rounds = [o["reached"] for o in outcomes]
    got = [r for r in rounds if r is not None]
    whole = len(got) == len(rounds)
    return {
        "rounds": rounds,
        "mean": round(sum(got) / len(got), 1) if whole else None,
        "min": min(got) if whole else None,
        "max": max(got) if whole else None,
        "not_reached_by": None if whole else max(o["rounds_run"] for o in outcomes if o["reached"] is None),
        "diverged": sum(o["status"] == "diverged" for o in outcomes),
    }


def table_row(model: str, partition: str, row: tuple[int, int | None], by_lr: dict[float, Any]) -> dict[str, Any]:
    figures = {lr: lr_figures(outcomes) for lr, outcomes in by_lr.items()}
    reaching = [lr for lr, f in figures.items() if f["mean"] is not None]
    best = min(reaching, key=lambda lr: figures[lr]["mean"]) if reaching else None
    chosen = figures[best] if best is not None else None
    paper = PAPER[model][row][0 if partition == "iid" else 1]
    epochs, batch = row
    return {
        "model": model,
        "partition": partition,
        "row": row_name(row),
        "E": epochs,
        "B": batch or "inf",
        "u": epochs * SAMPLES // batch if batch else epochs,
        "paper_rounds": paper,
        "paper_speedup": round(PAPER[model][FEDSGD][0 if partition == "iid" else 1] / paper, 1),
        "lr": best,
        "rounds": chosen["rounds"] if chosen else None,
        "mean": chosen["mean"] if chosen else None,
        "min": chosen["min"] if chosen else None,
        "max": chosen["max"] if chosen else None,
        "not_reached_by": None if chosen else max(f["not_reached_by"] or 0 for f in figures.values()),
        "by_lr": {f"{lr:g}": f for lr, f in figures.items()},
    }


def parse_rows(names: list[str]) -> list[tuple[int, int | None]]:
    every = {row_name(row): row for table in PAPER.values() for row in table}
    if names == ["all"]:
        return list(every.values())
    unknown = [name for name in names if name not in every]
    if unknown:
        raise SystemExit(f"--rows: {', '.join(unknown)} not in Table 2 (rows: {', '.join(every)}, or all)")
    return [every[name] for name in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("runs") / "mcmahan", help="the runs and their outcomes")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "mnist")
    parser.add_argument("--only", choices=sorted(MODELS), help="one model (default both)")
    parser.add_argument("--partitions", nargs="+", choices=sorted(PARTITIONS), default=["iid", "noniid"])
    parser.add_argument("--rows", nargs="+", help="Table 2 rows (fedsgd, E1-B10, E5-Binf, ...; all)")
    parser.add_argument("--lrs", nargs="+", type=float, default=LRS, help="the learning-rate grid")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--max-rounds", nargs="+", default=[], metavar="MODEL=N", help="e.g. 2nn=2500 cnn=1500")
    parser.add_argument("--per-round", type=int, default=10, help="clients a round (C = 0.1 of 100)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--executor", default="auto")
    parser.add_argument("--checkpoint-every", default="auto", help="rounds between checkpoints, or auto")
    parser.add_argument("--tiny", action="store_true", help="the smoke test's size (see above)")
    args = parser.parse_args()
    caps, targets = dict(MAX_ROUNDS), dict(TARGET)
    for item in args.max_rounds:
        name, _, value = item.partition("=")
        if name not in MODELS or not value.isdigit():
            raise SystemExit(f"--max-rounds: {item!r} is not MODEL=N with MODEL one of {', '.join(MODELS)}")
        caps[name] = int(value)
    models = [args.only] if args.only else list(MODELS)
    rows = {m: parse_rows(args.rows) if args.rows else parse_rows(DEFAULT_ROWS[m]) for m in models}
    if args.checkpoint_every != "auto":
        args.checkpoint_every = int(args.checkpoint_every)
    if args.tiny:
        models, args.partitions, args.lrs, args.seeds, args.per_round = ["2nn"], ["iid"], [0.1], [0], 2
        rows, caps, targets = {"2nn": parse_rows(DEFAULT_ROWS["2nn"])}, {"2nn": 3}, {"2nn": 0.5}
    args.dir.mkdir(parents=True, exist_ok=True)
    settings = [(m, p, row) for m in models for p in args.partitions for row in rows[m] if row in PAPER[m]]
    outcomes: dict[tuple[str, str, tuple[int, int | None], float], list[dict[str, Any]]] = {}
    for seed in args.seeds:  # a whole table at one seed before the next
        for (model, partition, row), lr in itertools.product(settings, args.lrs):
            key = run_key(model, partition, row, lr, seed, targets[model])
            config = run_config(key, model, partition, row, lr, seed, caps[model], args)
            outcome = run_one(key, config, targets[model], args.dir)
            outcomes.setdefault((model, partition, row, lr), []).append(outcome)
            said = {k: outcome[k] for k in ("status", "reached", "rounds_run", "best", "how", "wall_s")}
            print(f"{key}: {json.dumps(said)}", file=sys.stderr, flush=True)
    table = [table_row(*setting, {lr: outcomes[(*setting, lr)] for lr in args.lrs}) for setting in settings]
    for entry in table:  # fedsim's speed-up: its own FedSGD's mean rounds over the row's, each at its chosen lr
        sgd = [t["mean"] for t in table if t["row"] == "fedsgd" and t["model"] == entry["model"]
               and t["partition"] == entry["partition"]]  # fmt: skip
        ok = bool(sgd) and sgd[0] is not None and entry["mean"] is not None
        entry["speedup"] = round(sgd[0] / entry["mean"], 1) if ok else None
    commits = sorted({o["commit"] for runs in outcomes.values() for o in runs})
    print(
        json.dumps(
            {
                "bench": "mcmahan",
                "paper": "McMahan et al. 2017, Table 2 (MNIST)",
                "targets": {m: targets[m] for m in models},
                "max_rounds": {m: caps[m] for m in models},
                "clients": 100,
                "per_round": args.per_round,
                "seeds": args.seeds,
                "lrs": args.lrs,
                "commit": commit(),
                "run_commits": commits,
                "tiny": args.tiny,
                "rows": table,
            }
        )
    )


if __name__ == "__main__":
    main()
