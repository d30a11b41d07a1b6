"""An edge device's side of ``split.proto``: open a session with its token, stream batches, evaluate."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import grpc

from fedsim.config import ConfigError
from fedsim.wire import split_pb2, split_pb2_grpc
from fedsim.wire.batch import WireBatch
from fedsim.wire.messages import to_message
from fedsim.wire.session import SESSION_KEY, channel_options


def read_token(path: Path) -> str:
    """A device's token file: the token on its first non-comment line."""
    if not path.is_file():
        raise ConfigError(f"{path}: token file not found")
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            return line
    raise ConfigError(f"{path}: empty token file")


class EdgeSession:
    """A channel to the cloud (TLS when ``ca`` is given) and, after :meth:`open`, a session on it."""

    def __init__(self, address: str, device: str, token: str, max_message_mb: int = 64, ca: Path | None = None):
        options = channel_options(max_message_mb)
        if ca is not None:
            credentials = grpc.ssl_channel_credentials(root_certificates=ca.read_bytes())
            self.channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(address, options=options)
        self.stub = split_pb2_grpc.SplitTrainerStub(self.channel)
        self.device, self._token = device, token
        self.session: split_pb2.Session | None = None

    def __enter__(self) -> EdgeSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.channel.close()

    def open(
        self, timeout: float = 30.0, role: split_pb2.Role = split_pb2.OWN_DATA, partition: int = 0
    ) -> split_pb2.Session:
        """Raises ``grpc.RpcError`` (UNAUTHENTICATED for a wrong token, UNAVAILABLE with no server,
        FAILED_PRECONDITION for a partition another device holds)."""
        request = split_pb2.OpenSessionRequest(device=self.device, token=self._token, role=role, partition=partition)
        self.session = self.stub.OpenSession(request, timeout=timeout, wait_for_ready=True)
        return self.session

    @property
    def _metadata(self) -> tuple[tuple[str, str], ...]:
        return ((SESSION_KEY, self.session.session_id if self.session else ""),)

    def train(self, batches: Iterable[WireBatch]) -> Iterator[split_pb2.StepReply]:
        """One reply per batch, in order, as the cloud steps; an invalid batch raises INVALID_ARGUMENT."""
        messages = (to_message(b) for b in batches)
        return iter(self.stub.Train(messages, metadata=self._metadata))

    def evaluate(self, batches: Iterable[WireBatch]) -> split_pb2.EvalReply:
        reply: split_pb2.EvalReply = self.stub.Evaluate((to_message(b) for b in batches), metadata=self._metadata)
        return reply

    def status(self) -> split_pb2.StatusReply:
        reply: split_pb2.StatusReply = self.stub.Status(split_pb2.StatusRequest(), metadata=self._metadata)
        return reply
