"""Server steps of your own, run at a named point of the round (``server_stages:``); see
:mod:`fedsim.sim.server_stages.base` for the protocol. fedsim registers no kind of its own here yet: the
built-in server steps (SecAgg+'s unmasking, the rule, DP's release, the server optimiser) are the engine's."""

from fedsim.sim.server_stages.base import (
    RowSpace,
    ServerStage,
    ServerStages,
    ServerView,
    StageContext,
    Stateless,
    stage_names,
)

__all__ = ["RowSpace", "ServerStage", "ServerStages", "ServerView", "StageContext", "Stateless", "stage_names"]
