"""``fedsim split``, ``serve``, ``codecs`` and ``edge export|run``: split fine-tuning from the command line.

The edge (``edge/``) and the cloud service (``server/``) are imported only by the command that needs them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from fedsim.cli.outputs import DB_HELP
from fedsim.config import ConfigError
from fedsim.split.config import SplitConfig, load_split_config

EXIT_REFUSED = 2  # the server refused our token or a batch: bad input, as on the command line
EXIT_UNREACHABLE = 1
STOP_GRACE_S = 5.0  # gRPC's grace for open streams after SIGINT/SIGTERM; serve exits once everything is saved


def _config(args: argparse.Namespace) -> SplitConfig:
    return load_split_config(args.config, list(args.set or []))


def _threads(cfg: SplitConfig) -> None:
    if cfg.threads:
        try:
            import torch
        except ImportError:  # an edge device without torch: ONNX Runtime takes cfg.threads itself
            return
        torch.set_num_threads(cfg.threads)


def _check_data(cfg: SplitConfig) -> None:
    """The config's SST-2 files read, hold a sentence for every client, and the adapters fit the model, before
    anything (the exported bottom) is written."""
    from fedsim.data.sst2 import load_sst2

    for split in ("train", "test"):
        path = Path(cfg.data.dir) / f"{split}.tsv"
        if not path.is_file():
            raise ConfigError(f"data.dir: {path} not found (SST-2 TSV with a 'sentence<TAB>label' header)")
    load_sst2(Path(cfg.data.dir), "test", cfg.model.num_labels, cfg.data.test_limit)
    train = load_sst2(Path(cfg.data.dir), "train", cfg.model.num_labels, cfg.data.train_limit)
    if cfg.data.clients > len(train):
        raise ConfigError(f"data.clients={cfg.data.clients} exceeds the {len(train)} training sentences")
    _check_adapter(cfg)


def _check_adapter(cfg: SplitConfig) -> None:
    """``adapter.r`` at most the model's hidden size: a wider low-rank factor adds nothing, costs without bound."""
    try:
        config = Path(cfg.model.directory) / "config.json"
        hidden = int(json.loads(config.read_text(encoding="utf-8"))["hidden_size"])
    except (ImportError, OSError, ValueError, KeyError, TypeError):
        return  # no model here (an edge device) or not a model directory: named where the model is loaded
    if cfg.adapter.r > hidden:
        raise ConfigError(f"adapter.r={cfg.adapter.r} is wider than the model (hidden size {hidden}): at most {hidden}")


def cmd_split(args: argparse.Namespace) -> int:
    from fedsim.cli.outputs import check_outputs, clear
    from fedsim.sim.persist.outputs import output_dir

    cfg = _config(args)
    if args.resume:
        out = args.out if args.out is not None else Path("out") / cfg.name
    else:
        out = output_dir(args.out, cfg.name, args.overwrite)
    check_outputs(out=out, db=args.db)
    _check_data(cfg)
    if not args.resume:
        clear(out, args.overwrite)
    _threads(cfg)
    from edge.onnx_bottom import EdgeEncoder
    from edge.run import export, model_path
    from fedsim.split.simulate import run_split

    if args.resume:
        from fedsim.split.regions import saved_regions
        from fedsim.split.trainer import saved_adapters

        saved = saved_regions(out) if cfg.regions > 1 else saved_adapters(out)
        if not saved.is_dir():
            raise ConfigError(f"--resume: no checkpoint in {out} (no {saved.name} directory)")
    onnx = out / "bottom.onnx"
    diff = export(cfg, onnx)
    print(f"bottom (embeddings + {cfg.model.split_layer} layers) -> {onnx}, max abs diff to torch {diff:.1e}")
    bottom = EdgeEncoder(onnx, model_path(cfg), cfg.model.max_length, cfg.threads or 1)

    def progress(step: int, loss: float, accuracy: float | None = None) -> None:
        shown = f", test accuracy {accuracy:.4f} through the codec" if accuracy is not None else ""
        if step == 1 or step % 10 == 0 or step == cfg.train.steps or shown:
            print(f"step {step}/{cfg.train.steps} loss {loss:.4f}{shown}", flush=True)

    clients = f"{cfg.data.clients} edge client{'s' * (cfg.data.clients > 1)}"
    print(f"reading SST-2 from {cfg.data.dir}, {clients}, codec {cfg.codec}; the first step follows", flush=True)

    if cfg.regions > 1:
        from fedsim.split.regions import run_regions

        summary = run_regions(cfg, out, args.db, bottom, resume=args.resume)
        print(
            f"{cfg.regions} regions, tau {summary['tau_first']} -> {summary['tau_last']}, "
            f"sync_bytes {summary['sync_bytes']}"
        )
    else:
        summary = run_split(cfg, out, args.db, bottom, on_step=progress, resume=args.resume)
    plain = summary.get("test_accuracy_uncompressed")
    ratios = ""
    if "compression_ratio" in summary:
        ratios = (
            f" = {summary['compression_ratio']:.1f}x against fp32 padded to the longest sentence, "
            f"{summary['compression_ratio_unpadded']:.1f}x against unpadded fp32"
        )
    print(
        f"run {summary['run_id']}: test_accuracy={summary['test_accuracy']:.4f} through the codec"
        + (f", {plain:.4f} uncompressed" if plain is not None else "")
        + f"; bytes_up={summary['bytes_up']:,} ({cfg.codec}){ratios}; wall_s={summary['wall_s']:.1f} "
        f"-> {out / 'summary.json'}"
    )
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    cfg = _config(args)
    if cfg.server.tokens is None:
        raise ConfigError("server.tokens: fedsim serve needs a file of 'device token' lines")
    for name in ("tokens", "cert", "key"):
        value = getattr(cfg.server, name)
        if value is not None and not Path(value).is_file():
            raise ConfigError(f"server.{name}: {value}: file not found")
    from fedsim.cli.outputs import check_outputs
    from server.tokens import load_tokens

    _check_adapter(cfg)
    tokens = load_tokens(Path(cfg.server.tokens))
    out = args.out if args.out is not None else Path("out") / cfg.name
    check_outputs(out=out, db=args.db)
    _threads(cfg)
    from fedsim.runstore import RunStore
    from fedsim.split.trainer import CloudTrainer
    from server.listen import bind, serve
    from server.split_service import SplitService

    trainer = CloudTrainer(cfg)
    server, port = bind(cfg)  # a taken address is refused before a run is recorded or a file written
    out.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with RunStore(args.db) as store:
        service = SplitService(cfg, trainer, tokens, out, store, resume=args.resume)
        serve(server, service)
        host = cfg.server.address.rsplit(":", 1)[0]
        tls = "TLS" if cfg.server.cert else "insecure"
        print(f"serving {cfg.name} on {host}:{port} ({tls}), {len(tokens)} devices, run {service.run_id}", flush=True)
        announced = False
        while not stop.wait(0.2):
            if service.done.is_set() and not announced:
                budget = cfg.server.max_steps
                print(f"trained server.max_steps={budget} steps; Status stays up until SIGTERM", flush=True)
                announced = True
        stopping = server.stop(grace=STOP_GRACE_S)  # no new RPC; streams open now are cut after the grace
        service.close()  # no further batch: the one under way finishes before the checkpoint below
        adapters = service.checkpoint()
        summary = service.summary(adapters)
        service.run.finish(summary, out)
    changes = ", ".join(f"{n} {kind}" for kind, n in (summary.membership or {}).items() if n)
    print(f"stopped after {summary.steps} steps ({changes or 'no devices'}); adapters -> {adapters}", flush=True)
    if not stopping.wait(timeout=0.5):  # an RPC gRPC keeps until its device half-closes: everything is saved
        if service.streams:
            print(f"fedsim: {len(service.streams)} streams cut at exit", file=sys.stderr)
        sys.stderr.flush()
        os._exit(0)
    return 0


def cmd_edge_export(args: argparse.Namespace) -> int:
    cfg = _config(args)
    from edge.run import export

    diff = export(cfg, args.out)
    print(f"bottom (embeddings + {cfg.model.split_layer} layers) -> {args.out}, max abs diff to torch {diff:.1e}")
    return 0


def cmd_edge_run(args: argparse.Namespace) -> int:
    cfg = _config(args)
    if args.onnx is not None and not args.onnx.is_file():
        raise ConfigError(f"--onnx {args.onnx}: file not found")
    if args.ca is not None and not args.ca.is_file():
        raise ConfigError(f"--ca {args.ca}: file not found")
    if args.steps is not None and args.steps < 1:
        raise ConfigError(f"--steps must be >= 1, got {args.steps}")
    import grpc

    from edge.client import EdgeSession, read_token
    from edge.run import NoPartition, edge_data, run_edge
    from fedsim.data.sst2 import read_tsv

    token = read_token(args.token_file)
    data = edge_data(cfg, args.client, args.data, args.backup)
    if not args.wait > 0 or args.wait == float("inf"):
        raise ConfigError(f"--wait must be a positive number of seconds, got {args.wait}")
    evaluate = read_tsv(args.eval, cfg.model.num_labels) if args.eval is not None else None
    _threads(cfg)
    address = args.server or cfg.server.address

    def progress(step: int, loss: float, sent: int) -> None:
        print(f"{args.device}: server step {step} loss {loss:.4f} bytes_up {sent}", flush=True)

    def waiting(seconds: float) -> None:
        print(f"{args.device}: every partition has a device; asking again in {seconds:g} s", flush=True)

    try:
        with EdgeSession(address, args.device, token, cfg.server.max_message_mb, args.ca) as session:
            steps = args.steps or cfg.train.steps
            report = run_edge(cfg, session, data, steps, args.onnx, evaluate, progress, args.wait, waiting)
    except grpc.RpcError as exc:
        code: grpc.StatusCode = exc.code()
        print(f"fedsim: error: {address}: {code.name}: {exc.details()}", file=sys.stderr)
        refused = code in (
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        return EXIT_REFUSED if refused else EXIT_UNREACHABLE
    except NoPartition as exc:
        print(f"fedsim: error: {address}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    print(json.dumps(report.as_dict()), flush=True)
    return 0


def cmd_codecs(args: argparse.Namespace) -> int:
    from fedsim.comm.codecs import codecs

    for entry in codecs():
        print(f"{entry.usage:<16} {entry.summary}")
    print(f"{'CODEC+zstd':<16} any of these with its payload Zstandard-compressed (lossless)")
    return 0


def add_split_commands(sub: Any, db_default: Path) -> None:
    """Register the subcommands on ``fedsim``'s subparsers."""

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("config", type=Path, help="split YAML file, e.g. examples/split_sst2.yaml")
        p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a field, e.g. codec=int8")

    split = sub.add_parser("split", help="split fine-tuning with N edge clients and the cloud in one process")
    common(split)
    split.add_argument("--out", type=Path, default=None, help="output directory (default out/NAME, out/NAME-2, ...)")
    split.add_argument("--overwrite", action="store_true", help="replace the run already in --out")
    split.add_argument("--db", type=Path, default=db_default, help=DB_HELP)
    split.add_argument("--resume", action="store_true", help="go on from the newest checkpoint in --out")
    split.set_defaults(func=cmd_split)

    listing = sub.add_parser("codecs", help="list the activation codecs a split config may name")
    listing.set_defaults(func=cmd_codecs)

    serve = sub.add_parser("serve", help="the cloud trainer as a gRPC service, until SIGINT/SIGTERM")
    common(serve)
    serve.add_argument("--out", type=Path, default=None, help="adapters and summary.json (default out/NAME)")
    serve.add_argument("--db", type=Path, default=db_default, help=DB_HELP)
    serve.add_argument("--resume", action="store_true", help="go on from the newest checkpoint in --out")
    serve.set_defaults(func=cmd_serve)

    edge = sub.add_parser("edge", help="an edge device: export its bottom to ONNX, or train against a server")
    edge_sub = edge.add_subparsers(dest="edge_command", required=True, parser_class=type(edge))
    export = edge_sub.add_parser("export", help="export the frozen bottom to ONNX")
    common(export)
    export.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the .onnx file to write (the tokenizer goes beside it, NAME.tokenizer.json)",
    )
    export.set_defaults(func=cmd_edge_export)

    run = edge_sub.add_parser("run", help="stream this device's batches to a fedsim serve")
    common(run)
    run.add_argument("--device", required=True, help="this device's name in the server's token file")
    run.add_argument("--token-file", type=Path, required=True, help="file holding this device's token")
    run.add_argument("--server", default=None, help="host:port (default server.address of the config)")
    run.add_argument("--client", type=int, default=None, help="train on partition K of the config's data")
    run.add_argument("--data", type=Path, default=None, help="or on this TSV file (sentence<TAB>label)")
    run.add_argument(
        "--backup", action="store_true", help="or on the partition the server assigns (a vacated one first)"
    )
    run.add_argument(
        "--wait", type=float, default=600.0, help="a backup device waits this long for a partition (default 600 s)"
    )
    run.add_argument("--eval", type=Path, default=None, help="evaluate on this TSV file after training")
    run.add_argument("--onnx", type=Path, default=None, help="exported bottom (default: export it now)")
    run.add_argument(
        "--steps", type=int, default=None, help="batches to send (default train.steps); fewer if the server is done"
    )
    run.add_argument("--ca", type=Path, default=None, help="PEM root certificate: connect with TLS")
    run.set_defaults(func=cmd_edge_run)
