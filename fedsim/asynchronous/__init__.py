"""Asynchronous federated learning on the virtual clock: the event clock over a population trace
(``clock``) and the rules that apply stale updates, FedBuff's buffer and FedAsync's mixing (``rules``)."""

from fedsim.asynchronous.clock import Event, EventClock, Task
from fedsim.asynchronous.rules import Buffer, fedasync_mix_, staleness_weight

__all__ = ["Buffer", "Event", "EventClock", "Task", "fedasync_mix_", "staleness_weight"]
