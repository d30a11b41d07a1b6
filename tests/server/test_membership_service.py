"""Devices that come and go on a running split service, over a real channel: lost streams, superseded
sessions, partitions taken over by a backup device, the step budget, and the run store's membership rows."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from transformers import BertModel

from edge.client import EdgeSession
from fedsim.runstore import RunStore
from fedsim.split.trainer import CloudTrainer
from fedsim.wire import split_pb2
from fedsim.wire.messages import to_message
from server.listen import start_server
from server.split_service import SplitService
from tests.conftest import wait_until
from tests.split.test_trainer import make_batch
from tests.split_fixtures import split_config

TOKENS = {f"edge-{k}": f"token-of-edge-number-{k}-0000" for k in range(3)} | {"watch": "token-of-the-watcher-000"}


@pytest.fixture
def served(encoder: BertModel, tmp_path: Path) -> Iterator[tuple[SplitService, str]]:
    cfg = split_config(server={"address": "127.0.0.1:0", "max_steps": 6, "retry_after_s": 0.05}, data={"clients": 2})
    with RunStore(tmp_path / "runs.db") as store:
        service = SplitService(cfg, CloudTrainer(cfg, encoder), TOKENS, tmp_path, store)
        server, port = start_server(cfg, service)
        yield service, f"127.0.0.1:{port}"
        server.stop(grace=None)


def opened(address: str, device: str, role: int = split_pb2.OWN_DATA, partition: int = 0) -> EdgeSession:
    edge = EdgeSession(address, device, TOKENS[device], 16)
    edge.open(role=role, partition=partition)  # type: ignore[arg-type]
    return edge


def streaming(edge: EdgeSession) -> tuple[queue.Queue[split_pb2.Batch | None], grpc.Future]:
    """A Train stream fed batch by batch (``None`` ends it), and the call to read replies from or cancel."""
    feed: queue.Queue[split_pb2.Batch | None] = queue.Queue()
    assert edge.session is not None
    call = edge.stub.Train(iter(feed.get, None), metadata=(("fedsim-session", edge.session.session_id),))
    return feed, call


def test_a_device_cut_off_mid_stream_is_lost_and_a_backup_takes_over_its_partition(
    served: tuple[SplitService, str],
) -> None:
    service, address = served
    a = opened(address, "edge-0", split_pb2.PARTITION, 0)
    b = opened(address, "edge-1", split_pb2.PARTITION, 1)
    feed_a, stream_a = streaming(a)
    feed_a.put(to_message(make_batch()))
    assert next(stream_a).step == 1
    feed_b, stream_b = streaming(b)
    feed_b.put(to_message(make_batch(seed=1)))
    feed_b.put(to_message(make_batch(seed=2)))
    assert [next(stream_b).step, next(stream_b).step] == [2, 3]
    backup = EdgeSession(address, "edge-2", TOKENS["edge-2"], 16)
    assert backup.open(role=split_pb2.BACKUP).partition == -1  # both partitions held: it waits
    stream_b.cancel()  # edge-1 dies mid-stream
    wait_until(lambda: service.membership.counts()["lost"] == 1, "the device counted lost")
    taken = backup.open(role=split_pb2.BACKUP)
    assert (taken.partition, taken.partition_batches, taken.partitions) == (1, 2, 2)
    assert [r.step for r in backup.train([make_batch(seed=3)])] == [4]  # nothing edge-1 trained is undone
    feed_a.put(None)  # edge-0 ends its stream: it leaves
    assert list(stream_a) == []
    wait_until(lambda: service.membership.counts()["leaves"] == 2, "two leaves")

    watcher = opened(address, "watch", split_pb2.OBSERVE)
    status = watcher.status()
    assert (status.joins, status.lost, status.takeovers, status.leaves, status.active) == (3, 1, 1, 2, 0)
    assert [(e.kind, e.device, e.partition, e.step) for e in status.events] == [
        ("join", "edge-0", 0, 0),
        ("join", "edge-1", 1, 0),
        ("standby", "edge-2", -1, 3),
        ("lost", "edge-1", 1, 3),
        ("join", "edge-2", 1, 3),
        ("takeover", "edge-2", 1, 3),
        ("leave", "edge-2", 1, 4),
        ("leave", "edge-0", 0, 4),
    ]
    assert {d.device: (d.batches, d.partition, d.active) for d in status.devices} == {
        "edge-0": (1, -1, False),
        "edge-1": (2, -1, False),
        "edge-2": (1, -1, False),
        "watch": (0, -1, False),
    }
    rows = RunStore.open_readonly(service._store.path).members(service.run_id)  # type: ignore[union-attr]
    assert [(r.kind, r.device, r.partition, r.round) for r in rows] == [
        (e.kind, e.device, e.partition, e.step) for e in status.events
    ]


def test_a_held_partition_is_failed_precondition_and_one_outside_the_config_invalid_argument(
    served: tuple[SplitService, str],
) -> None:
    _, address = served
    opened(address, "edge-0", split_pb2.PARTITION, 1)
    with pytest.raises(grpc.RpcError) as err:
        opened(address, "edge-1", split_pb2.PARTITION, 1)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "partition 1 is held by 'edge-0'" in (err.value.details() or "")
    with pytest.raises(grpc.RpcError) as err:
        opened(address, "edge-1", split_pb2.PARTITION, 5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_new_session_supersedes_the_old_one_and_an_observer_cannot_train(served: tuple[SplitService, str]) -> None:
    _, address = served
    old = opened(address, "edge-0")
    opened(address, "edge-0")
    with pytest.raises(grpc.RpcError) as err:
        old.status()
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED and "superseded" in (err.value.details() or "")
    with pytest.raises(grpc.RpcError) as err:
        list(opened(address, "watch", split_pb2.OBSERVE).train([make_batch()]))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_the_server_trains_its_budget_and_then_answers_out_of_range(served: tuple[SplitService, str]) -> None:
    service, address = served
    edge = opened(address, "edge-0")
    replies = []
    with pytest.raises(grpc.RpcError) as err:
        for reply in edge.train([make_batch(seed=k) for k in range(9)]):
            replies.append(reply.step)
    assert replies == [1, 2, 3, 4, 5, 6]
    assert err.value.code() == grpc.StatusCode.OUT_OF_RANGE and "max_steps=6" in (err.value.details() or "")
    assert service.done.is_set() and service.trainer.step == 6
    status = edge.status()  # the run is over for the device: it has left
    assert (status.active, status.leaves, status.lost) == (0, 1, 0)
