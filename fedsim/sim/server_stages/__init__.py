"""Server steps of your own, run at a named point of the round (``server_stages:``); see
:mod:`fedsim.sim.server_stages.base` for the protocol. The built-in server steps (SecAgg+'s unmasking, the rule,
DP's release, the server optimiser) are the engine's; the kinds registered here are ``lora_factor_error``
(:mod:`fedsim.sim.server_stages.lora_factor_error`), a measurement, and ``flexlora``
(:mod:`fedsim.sim.server_stages.flexlora`), FlexLoRA's aggregation of plain LoRA's factors."""

from fedsim.sim.server_stages.base import (
    RowSpace,
    ServerStage,
    ServerStages,
    ServerView,
    StageContext,
    Stateless,
    stage_names,
)
from fedsim.sim.server_stages.flexlora import FlexLora
from fedsim.sim.server_stages.lora_factor_error import LoraFactorError

__all__ = [
    "FlexLora",
    "LoraFactorError",
    "RowSpace",
    "ServerStage",
    "ServerStages",
    "ServerView",
    "StageContext",
    "Stateless",
    "stage_names",
]
