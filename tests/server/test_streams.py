"""The stream table's caps, without a server: what a device is told, and when it may stream again."""

from __future__ import annotations

import contextlib

import grpc
import pytest

from server.streams import StreamTable


class Aborted(Exception):
    pass


class Context:
    """The two calls the table makes on a gRPC servicer context."""

    def __init__(self) -> None:
        self.cancelled = False
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def cancel(self) -> None:
        self.cancelled = True

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise Aborted(details)


def test_a_third_stream_of_a_device_is_refused_with_the_setting_named() -> None:
    table = StreamTable(per_device=2, total=6)
    with contextlib.ExitStack() as held:
        for _ in range(2):
            held.enter_context(table.admit("edge-0", Context()))
        third = Context()
        with pytest.raises(Aborted), table.admit("edge-0", third):
            pass
        assert third.aborted == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "device 'edge-0' has 2 streams open (server.streams_per_device=2)",
        )
        with table.admit("edge-1", Context()):  # another device is not held back
            assert len(table) == 3
    assert len(table) == 0


def test_streams_cut_for_idleness_free_their_device_before_their_handlers_return() -> None:
    """The device hears CANCELLED when the reaper cuts its streams; their handler threads may still be reading.
    A stream opened at once must be admitted (CI caught the race: it was refused by the cut streams)."""
    table = StreamTable(per_device=2, total=6)
    idle = [Context(), Context()]
    with table.admit("edge-0", idle[0]), table.admit("edge-0", idle[1]):
        assert table.reap_idle(limit_s=0.0) == 2
        assert all(c.cancelled for c in idle)
        again = Context()
        with table.admit("edge-0", again):
            assert again.aborted is None
            assert len(table) == 3  # the cut streams' threads still count against the server-wide cap
        assert table.reap_idle(limit_s=0.0) == 0  # a stream is cut once


def test_the_server_wide_cap_counts_every_running_handler() -> None:
    table = StreamTable(per_device=4, total=2)
    first, second = Context(), Context()
    with table.admit("edge-0", first), table.admit("edge-1", second):
        table.reap_idle(limit_s=0.0)
        refused = Context()
        with pytest.raises(Aborted), table.admit("edge-2", refused):
            pass
        assert refused.aborted is not None and "server.workers - 2" in refused.aborted[1]
