"""The partition table of a split service whose devices come and go, without gRPC."""

from __future__ import annotations

import pytest

from fedsim.wire.split_pb2 import BACKUP, OBSERVE, OWN_DATA, PARTITION
from server.membership import Membership, MembershipError, NoSuchPartition


def kinds(m: Membership) -> list[tuple[str, str, int]]:
    return [(e.kind, e.device, e.partition) for e in m.events]


def test_a_backup_takes_over_the_partition_of_a_lost_device_and_goes_on_from_its_batches() -> None:
    m = Membership(partitions=2)
    assert m.join("a", "s-a", PARTITION, 0, step=0).partition == 0
    assert m.join("b", "s-b", PARTITION, 1, step=0).partition == 1
    for device, session in (("a", "s-a"), ("b", "s-b")):
        m.stream_opened(device, session, step=0)
    for _ in range(3):
        m.trained("b")
    waiting = m.join("c", "s-c", BACKUP, 0, step=3)
    assert waiting.standby and waiting.partition == -1  # both partitions held: c waits in the pool
    assert m.counts()["standby"] == 1
    m.stream_closed("b", "s-b", lost=True, step=5)
    assert m.partition_of("b") == -1
    taken = m.join("c", "s-c2", BACKUP, 0, step=5)
    assert (taken.partition, taken.batches, taken.standby) == (1, 3, False)
    assert kinds(m) == [
        ("join", "a", 0),
        ("join", "b", 1),
        ("standby", "c", -1),
        ("lost", "b", 1),
        ("join", "c", 1),
        ("takeover", "c", 1),
    ]
    assert m.counts() == {"joins": 3, "leaves": 0, "lost": 1, "takeovers": 1, "active": 2, "standby": 0}


def test_a_backup_prefers_a_vacated_partition_to_one_never_held() -> None:
    m = Membership(partitions=3)
    m.join("a", "s-a", PARTITION, 1, step=0)
    m.stream_opened("a", "s-a", step=0)
    m.stream_closed("a", "s-a", lost=False, step=2)
    assert kinds(m)[-1] == ("leave", "a", 1)
    assert m.join("b", "s-b", BACKUP, 0, step=2).partition == 1
    assert m.join("c", "s-c", BACKUP, 0, step=2).partition == 0


def test_a_held_partition_or_one_outside_the_config_is_refused() -> None:
    m = Membership(partitions=2)
    m.join("a", "s-a", PARTITION, 0, step=0)
    with pytest.raises(MembershipError, match="partition 0 is held by 'a'"):
        m.join("b", "s-b", PARTITION, 0, step=0)
    with pytest.raises(NoSuchPartition, match=r"partition 7: the server's config has 0..1"):
        m.join("b", "s-b", PARTITION, 7, step=0)
    assert m.join("a", "s-a2", PARTITION, 0, step=0).partition == 0  # the holder itself may rejoin


def test_membership_ends_with_the_last_stream_of_the_newest_session() -> None:
    m = Membership(partitions=1)
    m.join("a", "old", OWN_DATA, 0, step=0)
    m.stream_opened("a", "old", step=0)
    m.join("a", "new", OWN_DATA, 0, step=1)  # a rejoin: the old session's stream no longer counts
    m.stream_opened("a", "new", step=1)
    m.stream_opened("a", "new", step=1)
    m.stream_closed("a", "old", lost=True, step=2)
    m.stream_closed("a", "new", lost=False, step=2)
    assert m.counts()["active"] == 1
    m.stream_closed("a", "new", lost=False, step=3)
    assert m.counts()["active"] == 0 and kinds(m)[-1] == ("leave", "a", -1)
    m.stream_opened("a", "new", step=4)  # streaming again on the same session rejoins
    counts = m.counts()  # the rejoin at step 1 ended the old membership: a leave, so every join is accounted for
    assert counts == {"joins": 3, "leaves": 2, "lost": 0, "takeovers": 0, "active": 1, "standby": 0}
    assert counts["joins"] == counts["leaves"] + counts["lost"] + counts["active"]


def test_an_observer_is_not_a_member_and_cannot_train() -> None:
    m = Membership(partitions=1)
    assert m.join("watch", "s", OBSERVE, 0, step=0).partition == -1
    assert m.events == []
    with pytest.raises(MembershipError, match="does not train"):
        m.stream_opened("watch", "s", step=0)


def test_a_restored_membership_keeps_counts_and_the_log_up_to_the_checkpoint() -> None:
    m = Membership(partitions=2)
    m.join("a", "s-a", PARTITION, 1, step=0)
    m.stream_opened("a", "s-a", step=0)
    m.trained("a")
    saved = m.state()
    m.stream_closed("a", "s-a", lost=True, step=9)  # after the checkpoint: not in it
    again = Membership(partitions=2)
    again.restore(saved, step=1)
    assert kinds(again) == [("join", "a", 1)]
    assert again.join("a", "s", PARTITION, 1, step=1).batches == 1  # its own partition back: no takeover
    assert [e.kind for e in again.events] == ["join", "join"]
