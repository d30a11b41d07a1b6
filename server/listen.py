"""Binding, starting and serving the split service on a gRPC server (TLS when a certificate is given)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc

from fedsim.config import ConfigError
from fedsim.split.config import SplitConfig
from fedsim.wire import split_pb2_grpc
from fedsim.wire.session import channel_options
from server.split_service import SplitService


@contextlib.contextmanager
def _native_stderr_off() -> Iterator[None]:
    """File descriptor 2 points at /dev/null inside: what native code (gRPC's C core) logs there is dropped."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def bind(cfg: SplitConfig) -> tuple[grpc.Server, int]:
    """A server bound to ``cfg.server.address`` (TLS when cert and key are given), not yet serving; a taken or
    bad address is :class:`ConfigError` before any run is recorded."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=cfg.server.workers), options=channel_options(cfg.server.max_message_mb)
    )
    try:
        with _native_stderr_off():  # gRPC's own log line of a failed bind; ours below says what to fix
            if cfg.server.cert and cfg.server.key:
                credentials = grpc.ssl_server_credentials(
                    [(Path(cfg.server.key).read_bytes(), Path(cfg.server.cert).read_bytes())]
                )
                port = server.add_secure_port(cfg.server.address, credentials)
            else:
                port = server.add_insecure_port(cfg.server.address)
    except RuntimeError as exc:
        raise ConfigError(f"server.address {cfg.server.address}: cannot listen ({exc})") from None
    return server, port


def serve(server: grpc.Server, service: SplitService) -> None:
    """Add the service to a bound server, start it and the idle-stream reaper."""
    split_pb2_grpc.add_SplitTrainerServicer_to_server(service, server)
    threading.Thread(target=service.watch, name="fedsim-idle-streams", daemon=True).start()
    server.start()


def start_server(cfg: SplitConfig, service: SplitService) -> tuple[grpc.Server, int]:
    """:func:`bind` and :func:`serve`; returns the server and its bound port."""
    server, port = bind(cfg)
    serve(server, service)
    return server, port
