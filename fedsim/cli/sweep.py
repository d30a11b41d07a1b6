"""``fedsim sweep GRID.yaml``: a grid of runs placed on an emulated pool of device types by Gavel's policies."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fedsim.cli.outputs import DB_HELP


def _cmd_sweep(args: argparse.Namespace) -> int:
    from fedsim.cli.outputs import check_outputs, clear
    from fedsim.config import ConfigError
    from fedsim.sim.persist.outputs import output_dir
    from fedsim.sweep.grid import load_sweep, measure

    try:
        from fedsim.sweep.run import execute, plan, report, write_report  # Gavel's programmes: cvxpy
    except ImportError as exc:
        raise ConfigError(
            f"fedsim sweep needs the sweep extra ({exc.name} is missing): pip install 'fedsim[sweep]'"
        ) from None

    sets = list(args.set or [])
    if args.policy is not None:
        sets.append(f"policy={args.policy}")
    cfg, runs = load_sweep(args.grid, sets)
    out = output_dir(args.out, cfg.name, args.overwrite)
    check_outputs(out=out, db=args.db)
    clear(out, args.overwrite)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(cfg.model_dump_json(indent=2) + "\n")  # marks out/NAME taken
    print(f"sweep {cfg.name}: {len(runs)} runs on {sum(cfg.types.values())} devices of {len(cfg.types)} types")
    host_s = [measure(run.cfg, cfg.measure_rounds) for run in runs]
    placed = plan(cfg, runs, host_s)
    schedule = placed.schedule
    print(
        f"{cfg.policy}: makespan {schedule.makespan_s:.4g} s, mean completion {schedule.mean_completion_s:.4g} s"
        " (virtual)",
        flush=True,
    )
    records = execute(placed, runs, out / "runs", args.db)
    write_report(out / "sweep.json", report(cfg, placed, host_s, records))
    print(f"sweep {cfg.name}: {len(records)} runs finished -> {out / 'sweep.json'}")
    return 0


def add_sweep_command(sub: Any, default_db: Path) -> None:
    sweep = sub.add_parser("sweep", help="a grid of runs on an emulated pool of device types, placed by Gavel")
    sweep.add_argument("grid", type=Path, help="YAML sweep file, e.g. examples/sweep.yaml")
    sweep.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a sweep field")
    sweep.add_argument("--policy", choices=("min_makespan", "max_min_fairness", "lpt"), default=None)
    sweep.add_argument("--out", type=Path, default=None, help="output directory (default out/NAME)")
    sweep.add_argument("--overwrite", action="store_true", help="replace the sweep already in --out")
    sweep.add_argument("--db", type=Path, default=default_db, help=DB_HELP)
    sweep.set_defaults(func=_cmd_sweep)
