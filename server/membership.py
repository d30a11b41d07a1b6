"""Who is training on a running ``fedsim serve``: devices that come and go, and the partitions they hold.

A broker with a backup pool, in the manner of decentralised training on volunteer GPUs: a device joins when it
opens a session and is a member until its last Train stream ends, cleanly (``leave``) or cut off (``lost``).
Either way the partition it held is vacated; nothing it trained is undone, since every step it sent was
applied to the adapters when it was answered. A backup device asks for any partition and is given a vacated
one first (a ``takeover``: it goes on from the partition's batch count), then one nobody has held; with none
free it waits in the pool (``standby``) and asks again. Every change is an :class:`Event` with the server's
step, for Status, the run store and the dashboard. The class holds no lock: the service calls it under its own.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from fedsim.wire.split_pb2 import Role

KINDS = ("join", "leave", "lost", "takeover", "standby")
NO_PARTITION = -1


class MembershipError(ValueError):
    """A request membership cannot grant now; ``str()`` names the partition and who holds it."""


class NoSuchPartition(MembershipError):
    """A partition number outside the server's config: bad input, not a conflict."""


@dataclass(frozen=True)
class Event:
    at: float
    step: int
    kind: str
    device: str
    partition: int


@dataclass(frozen=True)
class Assignment:
    """What a joining device is told: its partition (-1: its own data, or waiting) and that partition's
    batches so far."""

    partition: int
    batches: int
    standby: bool = False


@dataclass
class Member:
    session: str
    role: int
    partition: int
    streams: int = 0


@dataclass
class Membership:
    """Members, the partition table and the event log of one service."""

    partitions: int
    clock: Callable[[], float] = time.time
    members: dict[str, Member] = field(default_factory=dict)
    sessions: dict[str, Member] = field(default_factory=dict)  # by device: its newest session, member or not
    batches: dict[int, int] = field(default_factory=dict)  # per partition, over all its holders
    vacated: dict[int, str] = field(default_factory=dict)  # free now, by last holder: backups take these first
    standby: set[str] = field(default_factory=set)
    events: list[Event] = field(default_factory=list)

    def _event(self, kind: str, device: str, partition: int, step: int) -> None:
        self.events.append(Event(self.clock(), step, kind, device, partition))

    def holder(self, partition: int) -> str | None:
        return next((name for name, m in self.members.items() if m.partition == partition), None)

    def _free(self) -> int | None:
        """A vacated partition first, then one never held; None when every partition has a holder."""
        held = {m.partition for m in self.members.values()}
        vacated = sorted(set(self.vacated) - held)
        if vacated:
            return vacated[0]
        return next((k for k in range(self.partitions) if k not in held and k not in self.batches), None)

    def _check_free(self, device: str, partition: int) -> None:
        holder = self.holder(partition)
        if holder is not None and holder != device:
            raise MembershipError(f"partition {partition} is held by {holder!r}; join as a backup instead")

    def join(self, device: str, session: str, role: int, partition: int, step: int) -> Assignment:
        """A session opened by ``device``; a device already a member rejoins (its old partition is let go)."""
        if role == Role.OBSERVE:
            return Assignment(NO_PARTITION, 0)
        if role == Role.PARTITION:
            if not 0 <= partition < self.partitions:
                raise NoSuchPartition(f"partition {partition}: the server's config has 0..{self.partitions - 1}")
            self._check_free(device, partition)
        replaced = self.members.get(device)
        if replaced is not None:  # the membership a rejoin replaces ends: a leave, so the counts add up
            self._event("leave", device, replaced.partition, step)
        self._vacate(device)
        if role == Role.BACKUP:
            free = self._free()
            if free is None:
                if device not in self.standby:
                    self.standby.add(device)
                    self._event("standby", device, NO_PARTITION, step)
                return Assignment(NO_PARTITION, 0, standby=True)
            partition = free
        elif role != Role.PARTITION:
            partition = NO_PARTITION
        self.sessions[device] = self._admit(device, Member(session, int(role), partition), step)
        return Assignment(partition, self.batches.get(partition, 0))

    def _admit(self, device: str, member: Member, step: int) -> Member:
        self.standby.discard(device)
        self.members[device] = member
        self._event("join", device, member.partition, step)
        last = self.vacated.pop(member.partition, None)
        if last is not None and last != device:
            self._event("takeover", device, member.partition, step)
        return member

    def _vacate(self, device: str) -> None:
        member = self.members.pop(device, None)
        if member is not None and member.partition != NO_PARTITION:
            self.vacated[member.partition] = device

    def partition_of(self, device: str) -> int:
        member = self.members.get(device)
        return NO_PARTITION if member is None else member.partition

    def stream_opened(self, device: str, session: str, step: int) -> None:
        """A Train stream on ``session``; a device that left and streams again on it rejoins its partition."""
        member = self.members.get(device)
        if member is None or member.session != session:
            last = self.sessions.get(device)
            if last is None or last.session != session or last.role == Role.OBSERVE:
                raise MembershipError("this session does not train: open one with a training role")
            if last.partition != NO_PARTITION:
                self._check_free(device, last.partition)
            member = self._admit(device, Member(session, last.role, last.partition), step)
            self.sessions[device] = member
        member.streams += 1

    def trained(self, device: str) -> None:
        member = self.members.get(device)
        if member is not None and member.partition != NO_PARTITION:
            self.batches[member.partition] = self.batches.get(member.partition, 0) + 1

    def stream_closed(self, device: str, session: str, lost: bool, step: int) -> None:
        """A Train stream ended by the device (``lost``: cut off); its last one ends its membership."""
        member = self.members.get(device)
        if member is None or member.session != session:  # superseded by a newer session meanwhile
            return
        member.streams -= 1
        if member.streams > 0:
            return
        self._vacate(device)
        self._event("lost" if lost else "leave", device, member.partition, step)

    def counts(self) -> dict[str, int]:
        """Events by kind, members and devices in the pool now: joins = leaves + lost + active."""
        kinds = Counter(e.kind for e in self.events)
        return {
            "joins": kinds["join"],
            "leaves": kinds["leave"],
            "lost": kinds["lost"],
            "takeovers": kinds["takeover"],
            "active": len(self.members),
            "standby": len(self.standby),
        }

    def state(self) -> dict[str, object]:
        """What a checkpoint keeps: batches per partition and the log (members must reconnect anyway)."""
        return {
            "batches": {str(k): v for k, v in self.batches.items()},
            "events": [vars(e).copy() for e in self.events],
        }

    def restore(self, state: dict[str, object], step: int) -> None:
        """Back to a checkpoint at ``step``: its log (later events are dropped) and batch counts; every
        partition held before is vacated, since its holder must reconnect."""
        batches = state.get("batches", {})
        events = state.get("events", [])
        assert isinstance(batches, dict) and isinstance(events, list)
        self.batches = {int(k): int(v) for k, v in batches.items()}
        self.events = [Event(**e) for e in events if int(e["step"]) <= step]
        self.vacated = {e.partition: e.device for e in self.events if e.kind == "join" and e.partition >= 0}
