"""Client state follows its client between the ranks of a pool."""

from __future__ import annotations

from fedsim.sim.runtime.pool import Pool
from fedsim.sim.state.state_store import StateStore


def hand_off(store: StateStore, pool: Pool, plan: list[list[int]], shared: bool) -> int:
    """Before a round trains, clients whose state this rank holds but another rank trains (``plan[d]`` are the
    clients of logical device ``d``, which rank ``d % world`` hosts) leave this rank's store, and those it
    trains arrive from the rank that held them. A ``shared`` store (one disk directory for every rank) only
    writes its cached copies back. Returns the bytes moved between ranks."""
    if pool.world == 1:
        return 0
    rank_of = {cid: d % pool.world for d, clients in enumerate(plan) for cid in clients}
    outgoing = store.release([cid for cid, rank in rank_of.items() if rank != pool.rank])
    if shared:
        return 0  # the files are already where every rank can read them
    gathered, moved = pool.all_gather(outgoing)
    for states in gathered:
        for cid, state in states.items():
            if rank_of[cid] == pool.rank:
                store.put(cid, state)
    return moved
