"""Typed, frozen configuration, validated once at the edge of fedsim and passed down as values.

``base`` holds the mechanics (strict models, YAML and ``--set``, one-line errors); ``data``, ``engine`` and
``control`` the sections a run shares with split fine-tuning; ``algorithm`` the registry each algorithm's config
joins; ``run`` the simulation's :class:`RunConfig`. Everything is importable from here.
"""

from __future__ import annotations

from fedsim.config.adapter import ADAPTERS, AdapterConfig, register_adapter
from fedsim.config.algorithm import (
    AlgorithmBase,
    AlgorithmConfig,
    local_training,
    register_algorithm,
    unregister_algorithm,
)
from fedsim.config.asynchronous import AsyncConfig
from fedsim.config.attack import ATTACKS, AttackConfig, register_attack
from fedsim.config.base import (
    ConfigError,
    RunName,
    Strict,
    apply_override,
    format_error,
    load_tree,
    named_by_overrides,
    renamed,
    validate,
)
from fedsim.config.clock import ClockConfig, SyntheticTraceConfig, TraceConfig
from fedsim.config.compressor import COMPRESSORS, CompressorConfig, register_compressor
from fedsim.config.control import ControlConfig, FixedControl, KnobConfig, SkewScoutControl
from fedsim.config.coreset import CoresetConfig
from fedsim.config.data import (
    ColumnPartition,
    CrossDeviceTextData,
    DataConfig,
    DigitsData,
    DirichletPartition,
    FileData,
    FlwrPartition,
    HfDiskData,
    IidPartition,
    ImageFolderData,
    LabelSkewPartition,
    LeafData,
    MnistData,
    ModelConfig,
    Partition,
    ProvidedData,
    PythonData,
    QuantitySkewPartition,
    RandomData,
    ShardsPartition,
    Sst2Data,
    SyntheticData,
    TextData,
)
from fedsim.config.engine import (
    CheckpointConfig,
    EmulationConfig,
    ExecutorConfig,
    FederatedEvalConfig,
    SchedulerConfig,
    StateConfig,
)
from fedsim.config.privacy import PRIVACY, AdaptiveClip, PrivacyConfig, SecAggConfig, register_privacy
from fedsim.config.respell import SpellingNote
from fedsim.config.robust import AGGREGATORS, AggregatorConfig, register_aggregator
from fedsim.config.run import RunConfig, load_config, parse_config
from fedsim.config.selection import (
    SELECTORS,
    OortSelection,
    PowerOfChoiceSelection,
    SelectionConfig,
    register_selector,
)
from fedsim.config.server_optimizer import SERVER_OPTIMIZERS, ServerOptimizerConfig, register_server_optimizer
from fedsim.config.server_stage import SERVER_STAGES, RowsStageConfig, ServerStageConfig, register_server_stage
from fedsim.config.task import LrSchedule, TaskConfig
from fedsim.config.topology import TopologyConfig
from fedsim.config.tracking import TrackingConfig

__all__ = [
    "ADAPTERS",
    "AGGREGATORS",
    "ATTACKS",
    "COMPRESSORS",
    "PRIVACY",
    "SELECTORS",
    "SERVER_OPTIMIZERS",
    "SERVER_STAGES",
    "AdapterConfig",
    "AdaptiveClip",
    "AggregatorConfig",
    "AlgorithmBase",
    "AlgorithmConfig",
    "AsyncConfig",
    "AttackConfig",
    "CheckpointConfig",
    "ClockConfig",
    "ColumnPartition",
    "CompressorConfig",
    "ConfigError",
    "ControlConfig",
    "CoresetConfig",
    "CrossDeviceTextData",
    "DataConfig",
    "DigitsData",
    "DirichletPartition",
    "EmulationConfig",
    "ExecutorConfig",
    "FederatedEvalConfig",
    "FileData",
    "FixedControl",
    "FlwrPartition",
    "HfDiskData",
    "IidPartition",
    "ImageFolderData",
    "KnobConfig",
    "LabelSkewPartition",
    "LeafData",
    "LrSchedule",
    "MnistData",
    "ModelConfig",
    "OortSelection",
    "Partition",
    "PowerOfChoiceSelection",
    "PrivacyConfig",
    "ProvidedData",
    "PythonData",
    "QuantitySkewPartition",
    "RandomData",
    "RowsStageConfig",
    "RunConfig",
    "RunName",
    "SchedulerConfig",
    "SecAggConfig",
    "SelectionConfig",
    "ServerOptimizerConfig",
    "ServerStageConfig",
    "ShardsPartition",
    "SkewScoutControl",
    "SpellingNote",
    "Sst2Data",
    "StateConfig",
    "Strict",
    "SyntheticData",
    "SyntheticTraceConfig",
    "TaskConfig",
    "TextData",
    "TopologyConfig",
    "TraceConfig",
    "TrackingConfig",
    "apply_override",
    "format_error",
    "load_config",
    "load_tree",
    "local_training",
    "named_by_overrides",
    "parse_config",
    "register_adapter",
    "register_aggregator",
    "register_algorithm",
    "register_attack",
    "register_compressor",
    "register_privacy",
    "register_selector",
    "register_server_optimizer",
    "register_server_stage",
    "renamed",
    "unregister_algorithm",
    "validate",
]
