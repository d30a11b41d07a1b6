"""Server steps of your own, run at a named point of the round (``server_stages:``); see
:mod:`fedsim.sim.server_stages.base` for the protocol. The built-in server steps (SecAgg+'s unmasking, the rule,
DP's release, the server optimiser) are the engine's; the one kind registered here is ``lora_factor_error``
(:mod:`fedsim.sim.server_stages.lora_factor_error`), a measurement."""

from fedsim.sim.server_stages.base import (
    RowSpace,
    ServerStage,
    ServerStages,
    ServerView,
    StageContext,
    Stateless,
    stage_names,
)
from fedsim.sim.server_stages.lora_factor_error import LoraFactorError

__all__ = [
    "LoraFactorError",
    "RowSpace",
    "ServerStage",
    "ServerStages",
    "ServerView",
    "StageContext",
    "Stateless",
    "stage_names",
]
