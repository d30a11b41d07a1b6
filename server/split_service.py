"""``fedsim serve``: the cloud half of split fine-tuning as a gRPC service (``fedsim/wire/split.proto``).

A device opens a session with its token and then streams batches. Every batch goes through the trainer's
validation before anything is trained; a malformed one ends that device's stream with INVALID_ARGUMENT and
leaves the adapters as they were, while other devices' streams go on. A missing or wrong token or session is
UNAUTHENTICATED. Message size limits apply in both directions (the 4 MiB default is smaller than one fp32
batch). Adapters are checkpointed every ``train.checkpoint_every`` steps and on shutdown, each time as a whole
directory swapped in by rename. Every step is a row in the run store, so the dashboard can follow a live run.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import grpc

from fedsim.runstore import RunStore
from fedsim.split.config import SplitConfig
from fedsim.split.step import StepRecord, split_step, step_row
from fedsim.split.summary import SplitSummary
from fedsim.split.trainer import CloudTrainer, EvalResult
from fedsim.wire import split_pb2, split_pb2_grpc
from fedsim.wire.batch import BatchError, WireBatch
from fedsim.wire.messages import from_message
from fedsim.wire.session import SESSION_KEY, channel_options
from server.tokens import token_matches

__all__ = ["SESSION_KEY", "SplitService", "channel_options", "start_server"]


@dataclass
class DeviceStats:
    batches: int = 0
    examples: int = 0
    bytes_received: int = 0
    rejected: int = 0
    last_loss: float = float("nan")


class SplitService(split_pb2_grpc.SplitTrainerServicer):
    """Sessions, validation, training, checkpoints and run-store rows around one :class:`CloudTrainer`."""

    def __init__(
        self,
        cfg: SplitConfig,
        trainer: CloudTrainer,
        tokens: dict[str, str],
        out: Path,
        store: RunStore | None,
        resume: bool = False,
    ) -> None:
        """With ``resume`` the trainer, the per-device counts and the run (its id, its rows up to the
        checkpoint) continue from the newest checkpoint in ``out``."""
        self.cfg, self.trainer, self.out = cfg, trainer, out
        self._tokens = tokens
        self._client_index = {device: k for k, device in enumerate(sorted(tokens))}  # run-store client ids
        self._sessions: dict[str, str] = {}
        self._stats: dict[str, DeviceStats] = {}
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()  # a periodic checkpoint and the one at shutdown must not interleave
        self._store = store
        self.started = time.time()
        self.checkpoints = 0
        progress = trainer.load(out, resume=True) if resume else None
        if progress is not None:
            self.run_id = str(progress["run_id"])
            self._stats = {name: DeviceStats(**stats) for name, stats in progress.get("devices", {}).items()}
            if store is not None and self.run_id:
                store.truncate_after(self.run_id, int(progress["step"]))
                store.set_status(self.run_id, "resumed")
        elif store is not None:
            self.run_id = store.start_run(cfg.name, "split", cfg.model_dump(mode="json"), cfg.train.steps)
        else:
            self.run_id = ""

    # ------------------------------------------------------------------------------------------ helpers

    @staticmethod
    def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
        context.abort(code, message)
        raise AssertionError("unreachable: context.abort raises")

    def _device(self, context: grpc.ServicerContext) -> str:
        session = dict(context.invocation_metadata()).get(SESSION_KEY)
        if not isinstance(session, str) or not session:
            self._abort(context, grpc.StatusCode.UNAUTHENTICATED, f"no '{SESSION_KEY}' metadata: call OpenSession")
        with self._lock:
            device = self._sessions.get(session)
        if device is None:
            self._abort(context, grpc.StatusCode.UNAUTHENTICATED, "unknown session: call OpenSession again")
        return device

    def _batch(self, message: split_pb2.Batch, device: str, context: grpc.ServicerContext) -> WireBatch:
        try:
            return from_message(message)
        except BatchError as exc:
            self._reject(device, exc, context)

    def _reject(self, device: str, exc: BatchError, context: grpc.ServicerContext) -> NoReturn:
        with self._lock:
            self._stats[device].rejected += 1
        self._abort(context, grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    def _log(self, record: StepRecord) -> None:
        if self._store is None:
            return
        row, clients = step_row(self.run_id, record.step, [record], record.end - self.started)
        with self._lock:
            self._store.log_round(self.run_id, row, clients)

    def checkpoint(self) -> Path:
        with self._save_lock:
            with self._lock:
                devices = {name: vars(stats).copy() for name, stats in self._stats.items()}
            progress = {"run_id": self.run_id, "step": self.trainer.step, "devices": devices}
            path = self.trainer.save(self.out, progress)
        with self._lock:
            self.checkpoints += 1
        return path

    # ------------------------------------------------------------------------------------------ the RPCs

    def OpenSession(self, request: split_pb2.OpenSessionRequest, context: grpc.ServicerContext) -> split_pb2.Session:
        if not token_matches(self._tokens, request.device, request.token):
            self._abort(
                context, grpc.StatusCode.UNAUTHENTICATED, f"device {request.device!r}: unknown device or wrong token"
            )
        session = secrets.token_hex(16)
        with self._lock:
            self._sessions[session] = request.device
            self._stats.setdefault(request.device, DeviceStats())
        model = self.cfg.model
        return split_pb2.Session(
            session_id=session,
            model=self.trainer.base,
            split_layer=model.split_layer,
            hidden_size=self.trainer.wire_width,  # what each token's row on the wire holds
            num_labels=model.num_labels,
            max_length=model.max_length,
            max_message_bytes=self.cfg.server.max_message_mb * 2**20,
            codec=self.cfg.codec,
        )

    def Train(
        self, request_iterator: Iterator[split_pb2.Batch], context: grpc.ServicerContext
    ) -> Iterator[split_pb2.StepReply]:
        device = self._device(context)
        every = self.cfg.train.checkpoint_every
        for message in request_iterator:
            start = time.time()
            batch = self._batch(message, device, context)
            try:
                record = split_step(self.trainer, batch, self._client_index[device], start=start, device=device)
            except BatchError as exc:
                self._reject(device, exc, context)
            with self._lock:
                stats = self._stats[device]
                stats.batches += 1
                stats.examples += record.examples
                stats.bytes_received += record.bytes_sent
                stats.last_loss = record.loss
            self._log(record)
            if every and record.step % every == 0:
                self.checkpoint()
            yield split_pb2.StepReply(step=record.step, loss=record.loss, examples=record.examples)

    def Evaluate(
        self, request_iterator: Iterator[split_pb2.Batch], context: grpc.ServicerContext
    ) -> split_pb2.EvalReply:
        device = self._device(context)
        total = EvalResult(0, 0, 0.0)
        for message in request_iterator:
            try:
                total = total + self.trainer.evaluate(self._batch(message, device, context))
            except BatchError as exc:
                self._reject(device, exc, context)
        return split_pb2.EvalReply(
            examples=total.examples, correct=total.correct, accuracy=total.accuracy, loss=total.loss
        )

    def Status(self, request: split_pb2.StatusRequest, context: grpc.ServicerContext) -> split_pb2.StatusReply:
        self._device(context)
        with self._lock:
            devices = [
                split_pb2.DeviceStatus(device=name, **vars(stats)) for name, stats in sorted(self._stats.items())
            ]
            checkpoints = self.checkpoints
        return split_pb2.StatusReply(
            step=self.trainer.step,
            examples=self.trainer.examples,
            uptime_s=time.time() - self.started,
            checkpoints=checkpoints,
            devices=devices,
        )

    def summary(self, adapters: Path) -> SplitSummary:
        with self._lock:
            devices = {name: vars(stats).copy() for name, stats in sorted(self._stats.items())}
        return SplitSummary(
            run_id=self.run_id,
            steps=self.trainer.step,
            examples=self.trainer.examples,
            bytes_up=sum(d["bytes_received"] for d in devices.values()),
            rejected=sum(d["rejected"] for d in devices.values()),
            peak_activation_mb=self.trainer.peak_activation_mb,
            trainable_params=self.trainer.trainable_params,
            wall_s=time.time() - self.started,
            devices=devices,
            adapters=str(adapters),
        )


def start_server(cfg: SplitConfig, service: SplitService) -> tuple[grpc.Server, int]:
    """Bind ``cfg.server.address`` (TLS when cert and key are given) and start; returns the bound port."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=cfg.server.workers), options=channel_options(cfg.server.max_message_mb)
    )
    split_pb2_grpc.add_SplitTrainerServicer_to_server(service, server)
    if cfg.server.cert and cfg.server.key:
        credentials = grpc.ssl_server_credentials(
            [(Path(cfg.server.key).read_bytes(), Path(cfg.server.cert).read_bytes())]
        )
        port = server.add_secure_port(cfg.server.address, credentials)
    else:
        port = server.add_insecure_port(cfg.server.address)
    server.start()
    return server, port
