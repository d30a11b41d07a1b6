"""How much of a selector's cohort clients that lie about their loss take: attackers' share of the seats.

Workload: the quickstart (examples/quickstart.yaml: digits over 100 clients, Dirichlet 0.5 label skew, the
GroupNorm CNN, FedAvg) with 10 clients a round and the synthetic trace of bench/selection.py (Oort reads its
durations), 30 rounds. A ``fraction`` (0.3) of the clients, fixed by the seed, is malicious: kind
``report_only``, honest updates and ``attack.reported_loss=high`` (10 x the round's largest true loss, at least
1; fedsim.robust.reported_loss), so nothing but the reports differs from a clean run. The baseline is that
clean run, the same clients counted (what they take reporting honestly).

Selectors: ``uniform``, ``power_of_choice`` with d = 20 candidates, ``oort`` with FedScale's settings, and
``oort_blacklist``: Oort with its blacklist (``blacklist_rounds``, ``--blacklist`` rounds, 3 by default: a client
that trained more is not chosen again, at most 0.3 of the population; the defence Oort itself ships); and
``power_of_choice_screened``, ``oort_screened``: each with ``selection.loss_screen=mad``, Hampel's outlier
identifier on the reported losses (fedsim.sim.selection.screen). Seeds 0, 1, 2. One JSON line: per selector,
the malicious clients' share of all seats taken over the run, honest and lying, the mean over seeds and each
seed's; their share of the population beside it.

    python bench/selection_exposure.py [--rounds 30] [--seeds 0 1 2] [--cohort 10] [--candidates 20]
                                       [--fraction 0.3] [--clients 100] [--blacklist 3] [--selectors NAME ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from fedsim.config import load_config
from fedsim.robust.attack import malicious_clients
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine

ROOT = Path(__file__).resolve().parent.parent


def seat_share(selection: dict[str, Any], lying: bool, seed: int, args: argparse.Namespace, tmp: Path) -> float:
    """The malicious clients' share of the seats of one run (``lying``: they report a high loss)."""
    overrides = [f"seed={seed}", f"rounds={args.rounds}", f"clients_per_round={args.cohort}", "eval_every=1000"]
    overrides += [
        "progress=false",
        f"data.clients={args.clients}",
        *(f"selection.{k}={v}" for k, v in selection.items()),
    ]
    overrides += [f"clock.trace.synthetic.clients={args.clients}", "clock.trace.synthetic.seed=0"]
    if lying:
        overrides += ["attack.kind=report_only", f"attack.fraction={args.fraction}", "attack.reported_loss=high"]
    cfg = load_config(ROOT / "examples" / "quickstart.yaml", overrides)
    out = tmp / f"{'-'.join(f'{k}{v}' for k, v in selection.items())}-{lying}-{seed}"
    Engine(cfg, out_dir=out, db_path=out / "runs.db").run()
    with RunStore.open_readonly(out / "runs.db") as store:
        (record,) = store.list_runs()
        seats = [row.client for row in store.client_runs(record.run_id)]
    malicious = malicious_clients(seed, args.clients, args.fraction)  # the clients the attack would draw
    return sum(cid in malicious for cid in seats) / max(len(seats), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cohort", type=int, default=10)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--fraction", type=float, default=0.3)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--blacklist", type=int, default=3, help="oort_blacklist's blacklist_rounds")
    names = ["uniform", "power_of_choice", "oort", "oort_blacklist", "power_of_choice_screened", "oort_screened"]
    parser.add_argument("--selectors", nargs="+", choices=names, default=None, help="the rows to run; default all")
    args = parser.parse_args()
    selectors = {
        "uniform": {"kind": "uniform"},
        "power_of_choice": {"kind": "power_of_choice", "candidates": args.candidates},
        "oort": {"kind": "oort"},
        "oort_blacklist": {"kind": "oort", "blacklist_rounds": args.blacklist},
        "power_of_choice_screened": {"kind": "power_of_choice", "candidates": args.candidates, "loss_screen": "mad"},
        "oort_screened": {"kind": "oort", "loss_screen": "mad"},
    }
    selectors = {name: selectors[name] for name in args.selectors or selectors}
    line: dict[str, Any] = {"bench": "selection_exposure", "clients": args.clients, "cohort": args.cohort}
    line |= {"rounds": args.rounds, "seeds": args.seeds, "reported_loss": "high"}
    line["population_share"] = round(round(args.fraction * args.clients) / args.clients, 4)
    with tempfile.TemporaryDirectory(prefix="exposure-") as scratch:
        for name, selection in selectors.items():
            shares = {
                said: [seat_share(selection, said == "high", seed, args, Path(scratch)) for seed in args.seeds]
                for said in ("honest", "high")
            }
            line[name] = {f"seat_share_{said}": round(statistics.mean(each), 4) for said, each in shares.items()} | {
                f"seat_share_{said}_each": [round(s, 4) for s in each] for said, each in shares.items()
            }
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
