"""The ``fedsim`` command.

Every subcommand validates its input before touching disk: a bad config, override or path prints one line
``fedsim: error: ...`` on stderr and exits with status 2, leaving existing files alone.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import signal
import sqlite3
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from fedsim.cli.outputs import DB_HELP, check_outputs, clear
from fedsim.config import ConfigError, SpellingNote, load_config
from fedsim.config.variants import VariantNote
from fedsim.cores import check_rank_env, env_count
from fedsim.sim.persist.diverged import Diverged
from fedsim.sim.persist.failed import RunFailed
from fedsim.sim.persist.interrupted import RunInterrupted, on_signal
from fedsim.sim.persist.outputs import output_dir, why_no_checkpoint

if TYPE_CHECKING:
    from fedsim.sim.rounds.summary import Summary
    from fedsim.sim.run.settings import EngineSettings

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # as a shell reports a process stopped by SIGINT
EXIT_FAILED = 1  # the input was good but the machine (a full disk) or code of your own failed the run
EXIT_DIVERGED = 3  # the run ran, and its model stopped being finite
DISK_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)  # the machine failed the run, not its input


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors in fedsim's one-line form (still exit 2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        _fail(message)


def _fail(message: str) -> None:
    print(f"fedsim: error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def _cmd_run(args: argparse.Namespace) -> int:
    check_rank_env()  # torchrun's variables, before anything is written or cleared
    sets = list(args.set or [])
    if args.devices is not None:
        sets.append(f"devices={args.devices}")
    try:
        cfg = load_config(args.config, sets, args.unset or [])
    except ConfigError as exc:
        unknown = re.match(r"unknown key '([^']+)'", str(exc))  # the file's, left by a variant the --set switched
        if unknown and sets:
            raise ConfigError(f"{exc}; `--unset {unknown[1]}` drops it") from None
        raise
    out = output_dir(args.out, cfg.name, args.overwrite)
    if args.plan:  # what the run would pick and spend, its stages in order; nothing trained or written
        from fedsim import load_torch

        load_torch()
        from fedsim.api.launch import build_engine
        from fedsim.cli.preview import plan_report

        started = time.perf_counter()
        engine = build_engine(cfg, out, args.db)  # as the run builds it, never begun: nothing written
        print(plan_report(engine, out, args.db, time.perf_counter() - started))
        return 0
    check_outputs(out=out, db=args.db, state_dir=cfg.state.dir, tracking_dir=cfg.tracking.dir)
    clear(out, args.overwrite)
    return _execute(cfg, out, args.db, resume=False, ranks=args.ranks)


def _cmd_resume(args: argparse.Namespace) -> int:
    from fedsim.config.saved import provided_objects, saved_config

    check_rank_env()
    cfg = saved_config(args.dir)
    finished = args.dir / "summary.json"
    if finished.is_file():  # resuming it would train its last rounds again and rewrite the summary
        print(f"{args.dir}: the run finished ({finished}); nothing to resume, nothing changed")
        return 0
    if given := provided_objects(args.dir):  # the config does not hold them: Python must give them again
        objects = "".join(f", {name}=..." for name in given)
        raise ConfigError(
            f"{args.dir}: the run was made with Python objects ({', '.join(given)}); resume it from Python:"
            f" fedsim.Simulation.resume({str(args.dir)!r}{objects}).run()"
        )
    from fedsim.sim.persist.checkpoint import complete

    if not complete(args.dir / "checkpoints"):
        why = why_no_checkpoint(args.dir)
        raise ConfigError(f"no complete checkpoint in {args.dir / 'checkpoints'}: nothing to resume ({why})")
    from fedsim.sim.run.saved import check_resumable

    check_resumable(args.dir, args.db)
    check_outputs(out=args.dir, db=args.db, state_dir=cfg.state.dir, tracking_dir=cfg.tracking.dir)
    return _execute(cfg, args.dir, args.db, resume=True, ranks=args.ranks)


def _execute(cfg: EngineSettings, out: Path, db: Path, resume: bool, ranks: int | None) -> int:
    from fedsim import load_torch

    load_torch()  # heavy imports only once the config is known good
    from fedsim.api.launch import execute

    if ranks is not None and ranks < 1:
        raise ConfigError(f"--ranks must be >= 1, got {ranks}")
    try:
        summary = execute(cfg, out, db, resume=resume, ranks=ranks)
    except RunFailed as exc:  # code of your own raised mid-round: the run is marked failed
        print(f"fedsim: error: {exc}; the run is marked failed; {_saved(out, 'once that is fixed')}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:
        if exc.errno not in DISK_FULL:
            raise
        print(f"fedsim: error: {_where(exc)}{exc.strerror}; {_saved(out, 'once there is room')}", file=sys.stderr)
        return EXIT_FAILED
    if summary.run_id == "" or (_rank() != 0):
        return 0
    print(
        f"run {summary.run_id}: {summary.rounds} rounds, {_headline(summary)}, "
        f"wall_s={summary.wall_s:.1f}, samples_per_s={_rate(summary.samples_per_s)} -> {out / 'summary.json'}"
    )
    return 0


def _where(exc: OSError) -> str:
    return f"{exc.filename}: " if exc.filename else ""


def _saved(out: Path, when: str) -> str:
    """What a failed run left to go on from, and ``when`` to (``once there is room``)."""
    from fedsim.sim.persist.checkpoint import complete

    saved = complete(out / "checkpoints")
    if not saved:
        return "no checkpoint had been written, so there is nothing to resume"
    return f"the newest checkpoint {saved[-1]} is intact: `fedsim resume {out}` {when}"


def _headline(summary: Summary) -> str:
    """``final_accuracy=0.9123``, or the task's own headline (``final_perplexity=3.21``) when it has no accuracy
    or another headline metric."""
    metrics = {k: v for k, v in summary.final_metrics.items() if k not in ("loss", "accuracy")}
    if summary.task == "classification" or not summary.final_metrics:
        return f"final_accuracy={summary.final_accuracy:.4f}"
    name, value = next(iter(metrics.items())) if metrics else ("loss", summary.final_loss)
    return f"final_{name}={value:.4f}"


def _rank() -> int:
    return env_count("RANK", 0)


def _cmd_runs(args: argparse.Namespace) -> int:
    from fedsim.runstore import RunStore, RunStoreError, headline

    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit must be >= 1, got {args.limit}")
    try:
        store = RunStore.open_readonly(args.db)
    except RunStoreError as exc:
        raise ConfigError(str(exc)) from None
    with store:
        runs = store.list_runs()
    if args.delete is not None:  # its rows only: the run's files stay where they are
        with RunStore(args.db) as writer:
            gone = writer.delete_run(args.delete)
        print(f"deleted run {args.delete} from {args.db} ({gone} rows); its output directory is untouched")
        return 0
    wanted = args.name or ""
    runs = [r for r in runs if wanted in r.name or wanted in r.run_id]
    runs = [r for r in runs if args.status is None or r.status == args.status][: args.limit]
    if args.json or args.csv:  # every run, even none: a reader parses an empty list or a header
        from fedsim.tracking.listing import as_csv, as_json

        sys.stdout.write(as_json(runs) + "\n" if args.json else as_csv(runs))
        return 0
    if not runs:
        print(f"no runs in {args.db}" + (" match" if args.name or args.status else ""))
        return 0
    from fedsim.tracking.listing import run_row

    head = f"{'started':<19} {'kind':<10} {'status':<11} {'rounds':>6}  {'task':<14} {'final':<18}"
    print(f"{head} {'epsilon':>8} {'deployed':>8} {'audit':>8} {'MB up':>9} run_id")
    for run in runs:
        started = datetime.fromtimestamp(run.started_at).strftime("%Y-%m-%d %H:%M:%S")
        task, final = headline(run.summary or {})
        row = run_row(run)  # a private run's epsilon and the bytes its clients sent, where it has finished
        epsilons = [f"{row[k]:.3g}" if row[k] is not None else "-" for k in ("epsilon", "deployment_epsilon")]
        epsilons.append(f"{row['audit_epsilon']:.3g}" if row["audit_epsilon"] is not None else "-")
        up = f"{row['bytes_up'] / 1e6:,.2f}" if isinstance(row["bytes_up"], int) else "-"
        done = run.rounds_done
        line = f"{started:<19} {run.kind:<10} {run.status:<11} {done:>6}  {task:<14} {final:<18}"
        print(f"{line} {epsilons[0]:>8} {epsilons[1]:>8} {epsilons[2]:>8} {up:>9} {run.run_id}")
    return 0


def _cmd_dashboard(args: argparse.Namespace) -> int:
    import dashboard

    if not 1 <= args.port <= 65535:
        raise ConfigError(f"--port must be in 1..65535, got {args.port}")
    app = Path(dashboard.__file__).resolve().parent / "app.py"
    command = [sys.executable, "-m", "streamlit", "run", str(app), "--server.address", args.host]
    command += ["--server.port", str(args.port), "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    command += ["--client.toolbarMode", "viewer"]  # no Deploy button: this is a local viewer
    print(f"fedsim dashboard on http://{args.host}:{args.port} over {args.db} (Ctrl-C stops it)", flush=True)
    # this process becomes Streamlit's server, so a signal that stops `fedsim dashboard` stops the server too
    os.execve(sys.executable, command, {**os.environ, "FEDSIM_DB": str(args.db)})


def build_parser() -> argparse.ArgumentParser:
    from fedsim import __version__
    from fedsim.runstore import STATUSES, default_db

    parser = _Parser(prog="fedsim", description="Federated and edge-cloud simulation.")
    parser.add_argument("--version", action="version", version=f"fedsim {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run a federated simulation from a YAML config")
    run.add_argument("config", type=Path, help="YAML run file, e.g. examples/quickstart.yaml")
    run.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field, e.g. rounds=5")
    run.add_argument(
        "--unset", action="append", metavar="KEY", help="remove a key of the file, e.g. algorithm.momentum"
    )
    run.add_argument("--out", type=Path, default=None, help="output directory (default out/NAME, out/NAME-2, ...)")
    run.add_argument("--overwrite", action="store_true", help="replace the run already in --out")
    run.add_argument("--db", type=Path, default=default_db(), help=DB_HELP)
    run.add_argument("--devices", type=int, default=None, help="device pool size (one rank each by default)")
    run.add_argument("--ranks", type=int, default=None, help="processes to spread the devices over")
    run.add_argument(
        "--plan",
        action="store_true",
        help="print what the run would do (stages, executor, DP noise, epsilon); train nothing",
    )
    run.set_defaults(func=_cmd_run)

    resume = sub.add_parser("resume", help="continue a run from its last complete checkpoint")
    resume.add_argument("dir", type=Path, help="the run's output directory (holds config.json, checkpoints/)")
    resume.add_argument("--db", type=Path, default=default_db(), help=DB_HELP)
    resume.add_argument("--ranks", type=int, default=None, help="processes to spread the devices over")
    resume.set_defaults(func=_cmd_resume)

    runs = sub.add_parser("runs", help="list the runs in the run store")
    runs.add_argument("--db", type=Path, default=default_db(), help=DB_HELP)
    runs.add_argument("--name", default=None, help="only runs whose name or id contains this")
    runs.add_argument("--status", choices=STATUSES, default=None, help="only runs of this status")
    runs.add_argument("--limit", type=int, default=None, help="only the newest N")
    runs.add_argument("--delete", metavar="RUN_ID", default=None, help="remove a run's rows from the store")
    form = runs.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="a JSON list: task, algorithm, stages, final metric, ...")
    form.add_argument("--csv", action="store_true", help="the --json columns as CSV")
    runs.set_defaults(func=_cmd_runs)

    dash = sub.add_parser("dashboard", help="the live Streamlit dashboard over the run store (read-only)")
    dash.add_argument("--db", type=Path, default=default_db(), help=DB_HELP)
    dash.add_argument("--port", type=int, default=8501)
    dash.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback only)")
    dash.set_defaults(func=_cmd_dashboard)

    from fedsim.cli.split import add_split_commands

    add_split_commands(sub, default_db())
    from fedsim.cli.sweep import add_sweep_command

    add_sweep_command(sub, default_db())
    return parser


_show_warning = warnings.showwarning


def _note(message: Warning | str, category: type[Warning], *where: object, **kw: object) -> None:
    """An old spelling's note as one line on stderr; any other warning as Python shows it."""
    if issubclass(category, SpellingNote | VariantNote):
        print(f"fedsim: note: {message}", file=sys.stderr)
    else:
        _show_warning(message, category, *where, **kw)  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.showwarning = _note
    if threading.current_thread() is threading.main_thread() and args.func is not _cmd_dashboard:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a run stops at its next safe point, marked interrupted
            signal.signal(sig, on_signal)
    try:
        return _main(args)
    finally:
        if argv is None and args.func is not _cmd_dashboard:  # this process is the command: it is ending, and a
            for sig in (signal.SIGINT, signal.SIGTERM):  # signal now (its exit, atexit) would only spoil its code
                signal.signal(sig, signal.SIG_IGN)


def _main(args: argparse.Namespace) -> int:
    """The command ``args`` names, its errors said in one line each, and its exit code."""
    from fedsim.runstore import RunStoreError

    try:
        return int(args.func(args))
    except RunInterrupted as exc:  # a KeyboardInterrupt that says where the run stopped and how to go on
        print(f"fedsim: {exc}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        print("fedsim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ConfigError as exc:
        _fail(str(exc))
    except Diverged as exc:  # status diverged in the store; what was saved before stays
        print(f"fedsim: error: {exc}", file=sys.stderr)
        return EXIT_DIVERGED
    except BrokenPipeError:  # `fedsim runs | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 0
    except RunStoreError as exc:  # a damaged run store is bad input: one line, nothing saved lost
        if _busy(exc):
            print(f"fedsim: error: {exc}; try again once it is free", file=sys.stderr)
            return EXIT_FAILED
        _fail(str(exc))
    except sqlite3.DatabaseError as exc:
        said = f"run store {getattr(args, 'db', '')}: {exc}; the newest checkpoint is intact"
        if _busy(exc):  # the machine's state, not the input: exit 1, as for a full disk
            print(f"fedsim: error: {said}", file=sys.stderr)
            return EXIT_FAILED
        _fail(said)
    except OSError as exc:
        if exc.errno not in DISK_FULL:
            raise
        print(f"fedsim: error: {_where(exc)}{exc.strerror}; the newest checkpoint is intact", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())


def _busy(exc: Exception) -> bool:
    """Whether a run store failed for the machine's reasons (locked by another process, a full or failing
    disk) rather than for what it holds."""
    said = str(exc).lower()
    return any(word in said for word in ("database is locked", "disk is full", "disk i/o error"))


def _rate(samples_per_s: float | None) -> str:
    return "withheld" if samples_per_s is None else f"{samples_per_s:,.0f}"
