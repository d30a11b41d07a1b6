"""Asynchronous federated learning on the trace's virtual clock (:mod:`fedsim.traces.clock`): the rules that
apply stale updates, FedBuff's buffer and FedAsync's mixing (``rules``), the server (``server``) and the engine."""

from fedsim.asynchronous.rules import Buffer, fedasync_mix_, staleness_weight

__all__ = ["Buffer", "fedasync_mix_", "staleness_weight"]
