"""``fedsim serve``: the cloud half of split fine-tuning as a gRPC service (``fedsim/wire/split.proto``).

A device opens a session with its token and then streams batches. Every batch goes through the trainer's
validation before anything is trained; a malformed one ends that device's stream with INVALID_ARGUMENT and
leaves the adapters as they were, while other devices' streams go on. A missing or wrong token or session is
UNAUTHENTICATED. Message size limits apply in both directions (the 4 MiB default is smaller than one fp32
batch). Adapters are checkpointed every ``train.checkpoint_every`` steps and on shutdown, each time as a whole
directory swapped in by rename. Every step is a row in the run store, so the dashboard can follow a live run.

Devices come and go (:mod:`server.membership`): a device's newest session supersedes its older ones, a backup
device is given a vacated partition, and every join, leave, loss and takeover is counted in Status, kept in
checkpoints and written to the run store. With ``server.max_steps`` the service trains that many steps and then
ends every Train stream with OUT_OF_RANGE.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import grpc

from fedsim.runstore import MemberRow, RunStore
from fedsim.split.config import SplitConfig
from fedsim.split.lifecycle import SplitRun
from fedsim.split.step import StepRecord, split_step, step_row
from fedsim.split.summary import SplitSummary
from fedsim.split.trainer import CloudTrainer, EvalResult
from fedsim.wire import split_pb2, split_pb2_grpc
from fedsim.wire.batch import BatchError, BatchTooLarge, WireBatch
from fedsim.wire.messages import from_message
from fedsim.wire.session import SESSION_KEY
from server.membership import Membership, MembershipError, NoSuchPartition
from server.streams import RESERVED_WORKERS, DeviceStats, FifoLock, Session, Stream, StreamTable, capped, cut_off
from server.tokens import token_matches

__all__ = ["SESSION_KEY", "SplitService"]


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """With ``resume`` the trainer, the per-device counts and the run (its id, its rows up to the
        checkpoint) continue from the newest checkpoint in ``out``. ``clock`` (seconds) times how long a
        session has gone unused."""
        self.cfg, self.trainer, self.out = cfg, trainer, out
        self._clock = clock
        self._tokens = tokens
        self._client_index = {device: k for k, device in enumerate(sorted(tokens))}  # run-store client ids
        self._sessions: dict[str, Session] = {}  # by id; only each device's newest session
        self.streams = StreamTable(cfg.server.streams_per_device, max(1, cfg.server.workers - RESERVED_WORKERS))
        self._closing = threading.Event()
        self._stats: dict[str, DeviceStats] = {}
        self.membership = Membership(cfg.data.clients)
        self._logged_events = 0
        # one step at a time, devices in turn: the budget check, the step, its counts and row, and a checkpoint
        # due after it are one, so a checkpoint's progress always matches the trainer state it is saved with
        self._step_lock = FifoLock()
        self.done = threading.Event()  # set once server.max_steps steps are trained
        self._lock = threading.Lock()  # sessions, streams, counts and membership, between the RPC threads
        self._store = store
        self.started = time.time()
        self.checkpoints = 0
        progress = trainer.load(out, resume=True) if resume else None
        if progress is not None:
            self._stats = {name: DeviceStats(**stats) for name, stats in progress.get("devices", {}).items()}
            self.membership.restore(progress.get("membership", {}), int(progress["step"]))
            self._logged_events = len(self.membership.events)
        self.run = SplitRun(store, cfg, progress)
        self.run_id = self.run.run_id

    # ------------------------------------------------------------------------------------------ helpers

    @staticmethod
    def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
        context.abort(code, capped(message))
        raise AssertionError("unreachable: context.abort raises")

    def _device(self, context: grpc.ServicerContext) -> tuple[str, str]:
        """The caller's device and session id; UNAUTHENTICATED without a current session."""
        session = dict(context.invocation_metadata()).get(SESSION_KEY)
        if not isinstance(session, str) or not session:
            self._abort(context, grpc.StatusCode.UNAUTHENTICATED, f"no '{SESSION_KEY}' metadata: call OpenSession")
        now, ttl = self._clock(), self.cfg.server.session_idle_s
        with self._lock:
            entry = self._sessions.get(session)
            expired = entry is not None and now - entry.used > ttl
            if expired:
                del self._sessions[session]
            elif entry is not None:
                entry.used = now
        if entry is None:
            self._abort(
                context, grpc.StatusCode.UNAUTHENTICATED, "unknown or superseded session: call OpenSession again"
            )
        if expired:
            self._abort(
                context,
                grpc.StatusCode.UNAUTHENTICATED,
                f"session expired after {ttl:g} s unused (server.session_idle_s): call OpenSession again",
            )
        return entry.device, session

    def watch(self) -> None:
        """Reap idle streams until :meth:`close`; started beside the server by :func:`start_server`."""
        period = min(1.0, self.cfg.server.idle_timeout_s / 4)
        while not self._closing.wait(period):
            self.streams.reap_idle(self.cfg.server.idle_timeout_s)

    def close(self) -> None:
        """Stop the reaper and train no further batch: a stream that sends one is ended with UNAVAILABLE."""
        self._closing.set()

    def _log_events(self) -> None:
        """Write membership events not yet in the run store; the caller holds ``_lock``."""
        events = self.membership.events
        if self._store is not None and len(events) > self._logged_events:
            rows = [
                MemberRow(self.run_id, seq, e.step, e.at, e.kind, e.device, e.partition)
                for seq, e in enumerate(events[self._logged_events :], start=self._logged_events)
            ]
            self._store.log_members(rows)
        self._logged_events = len(events)

    def _close_stream(self, device: str, session: str, context: grpc.ServicerContext, ending: list[str]) -> None:
        """Called when a Train stream terminates: ``ending`` says how, unless the device was cut off."""
        how = ending[0] if ending else "lost"
        if how == "kept":  # the server ended it after a rejected batch: the device is still there
            return
        cut = cut_off(context)
        lost = how == "lost" if cut is None else cut
        with self._lock:
            self.membership.stream_closed(device, session, lost=lost, step=self.trainer.step)
            self._log_events()

    @property
    def finished(self) -> bool:
        budget = self.cfg.server.max_steps
        return bool(budget) and self.trainer.step >= budget

    def _batch(self, message: split_pb2.Batch, device: str, context: grpc.ServicerContext) -> WireBatch:
        try:
            return from_message(message)
        except BatchError as exc:
            self._reject(device, exc, context)

    def _reject(self, device: str, exc: BatchError, context: grpc.ServicerContext) -> NoReturn:
        with self._lock:
            self._stats[device].rejected += 1
        too_large = isinstance(exc, BatchTooLarge)
        code = grpc.StatusCode.RESOURCE_EXHAUSTED if too_large else grpc.StatusCode.INVALID_ARGUMENT
        self._abort(context, code, str(exc))

    def _account(self, device: str, record: StepRecord) -> None:
        """A trained step's counts and run-store row; the caller holds the step lock."""
        with self._lock:
            self.membership.trained(device)
            stats = self._stats[device]
            stats.batches += 1
            stats.examples += record.examples
            stats.bytes_received += record.bytes_sent
            stats.last_loss = record.loss
            row, clients = step_row(self.run_id, record.step, [record], record.end - self.started)
            self.run.log(row, clients)

    def checkpoint(self) -> Path:
        """Save the adapters, the trainer state and the progress (counts, membership) that goes with them,
        between two steps (it waits for a step under way)."""
        with self._step_lock:
            return self._checkpoint()

    def _checkpoint(self) -> Path:
        """:meth:`checkpoint` for a caller that holds the step lock: no step can land between the progress read
        here and the trainer state the save reads."""
        with self._lock:
            devices = {name: vars(stats).copy() for name, stats in self._stats.items()}
            membership = self.membership.state()
        progress = {"run_id": self.run_id, "step": self.trainer.step, "devices": devices, "membership": membership}
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
        failed: tuple[grpc.StatusCode, str] | None = None
        with self._lock:
            try:
                assigned = self.membership.join(
                    request.device, session, request.role, request.partition, self.trainer.step
                )
            except MembershipError as exc:
                code = grpc.StatusCode.INVALID_ARGUMENT if isinstance(exc, NoSuchPartition) else None
                failed = (code or grpc.StatusCode.FAILED_PRECONDITION, str(exc))
            else:
                for old in [k for k, s in self._sessions.items() if s.device == request.device]:
                    del self._sessions[old]  # the newest session supersedes the device's older ones
                self._sessions[session] = Session(request.device, self._clock())
                self._stats.setdefault(request.device, DeviceStats())
                self._log_events()
        if failed is not None:
            self._abort(context, *failed)
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
            partition=assigned.partition,
            partition_batches=assigned.batches,
            retry_after_s=self.cfg.server.retry_after_s if assigned.standby else 0.0,
            partitions=self.cfg.data.clients,
        )

    def Train(
        self, request_iterator: Iterator[split_pb2.Batch], context: grpc.ServicerContext
    ) -> Iterator[split_pb2.StepReply]:
        device, session = self._device(context)
        with self.streams.admit(device, context) as stream:
            yield from self._train(device, session, stream, request_iterator, context)

    def _train(
        self,
        device: str,
        session: str,
        stream: Stream,
        request_iterator: Iterator[split_pb2.Batch],
        context: grpc.ServicerContext,
    ) -> Iterator[split_pb2.StepReply]:
        with self._lock:
            try:
                self.membership.stream_opened(device, session, self.trainer.step)
            except MembershipError as exc:
                failed: str | None = str(exc)
            else:
                failed = None
                self._log_events()
        if failed is not None:
            self._abort(context, grpc.StatusCode.FAILED_PRECONDITION, failed)
        ending: list[str] = []  # empty while streaming: the device was cut off if the stream ends so
        context.add_callback(lambda: self._close_stream(device, session, context, ending))
        every = self.cfg.train.checkpoint_every
        for message in request_iterator:
            start = time.time()
            stream.last = time.monotonic()
            try:
                batch = self._batch(message, device, context)
                with self._step_lock:
                    if self.finished or self._closing.is_set():
                        ending.append("leave")  # the device's part is over
                        self._abort(context, *self._over())
                    try:
                        record = split_step(self.trainer, batch, self._client_index[device], start=start, device=device)
                    except BatchError as exc:
                        self._reject(device, exc, context)
                    self._account(device, record)
                    if every and record.step % every == 0:
                        self._checkpoint()
                stream.last = time.monotonic()
            except BaseException:
                ending.append("kept")  # a rejected batch: the device is still there and may stream again
                raise
            if self.finished:
                self.done.set()
            yield split_pb2.StepReply(step=record.step, loss=record.loss, examples=record.examples)
        ending.append("leave" if context.is_active() else "lost")

    def _over(self) -> tuple[grpc.StatusCode, str]:
        """Why a batch is no longer trained: the budget is spent, or the server is stopping."""
        if self.finished:
            budget = self.cfg.server.max_steps
            return grpc.StatusCode.OUT_OF_RANGE, f"the run is done: server.max_steps={budget} steps trained"
        return grpc.StatusCode.UNAVAILABLE, "the server is stopping: its adapters are being saved"

    def Evaluate(
        self, request_iterator: Iterator[split_pb2.Batch], context: grpc.ServicerContext
    ) -> split_pb2.EvalReply:
        device, _ = self._device(context)
        total = EvalResult(0, 0, 0.0)
        with self.streams.admit(device, context) as stream:
            for message in request_iterator:
                stream.last = time.monotonic()
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
            membership = self.membership
            devices = [
                split_pb2.DeviceStatus(
                    device=name,
                    active=name in membership.members,
                    partition=membership.partition_of(name),
                    **vars(stats),
                )
                for name, stats in sorted(self._stats.items())
            ]
            checkpoints = self.checkpoints
            counts = membership.counts()
            events = [split_pb2.MemberEvent(**vars(e)) for e in membership.events]
        return split_pb2.StatusReply(
            step=self.trainer.step,
            examples=self.trainer.examples,
            uptime_s=time.time() - self.started,
            checkpoints=checkpoints,
            devices=devices,
            max_steps=self.cfg.server.max_steps,
            events=events,
            **counts,
        )

    def summary(self, adapters: Path) -> SplitSummary:
        with self._lock:
            devices = {name: vars(stats).copy() for name, stats in sorted(self._stats.items())}
            membership = self.membership.counts()
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
            membership=membership,
            adapters=str(adapters),
        )
