"""One federated simulation: :class:`RunConfig`, and reading it from YAML."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SerializeAsAny, ValidationInfo, field_validator, model_validator

from fedsim.config.algorithm import AlgorithmBase, decentralised_kind, default_algorithm, parse_algorithm
from fedsim.config.asynchronous import AsyncConfig, asynchronous_refusal
from fedsim.config.attack import ATTACKS, AttackConfig
from fedsim.config.base import ConfigError, RunName, Strict, load_tree, renamed, validate
from fedsim.config.clock import ClockConfig, clock_refusal
from fedsim.config.compressor import COMPRESSORS, CompressorConfig
from fedsim.config.control import COMPRESSOR_KNOBS, ControlConfig, FixedControl
from fedsim.config.coreset import CoresetConfig
from fedsim.config.data import DataConfig, ModelConfig, text_refusal
from fedsim.config.engine import (
    CheckpointConfig,
    EmulationConfig,
    ExecutorConfig,
    FederatedEvalConfig,
    SchedulerConfig,
    StateConfig,
)
from fedsim.config.privacy import PRIVACY, PrivacyConfig, SecAggConfig, private_run_refusal
from fedsim.config.registry import Registry, StageConfig
from fedsim.config.respell import today_spelled
from fedsim.config.robust import AGGREGATORS, AggregatorConfig
from fedsim.config.selection import SELECTORS, SelectionConfig
from fedsim.config.server_optimizer import SERVER_OPTIMIZERS, ServerOptimizerConfig, server_optimizer_refusal
from fedsim.config.server_stage import ServerStageConfig, parse_server_stages
from fedsim.config.task import TaskConfig
from fedsim.config.topology import TopologyConfig
from fedsim.config.tracking import TrackingConfig
from fedsim.config.variants import switch_variants

MAX_ROUNDS = 10_000_000


# the stage sections of a run and the registry that resolves each one's kind
STAGES: dict[str, Registry[Any]] = {
    "attack": ATTACKS, "aggregator": AGGREGATORS, "uplink": COMPRESSORS, "downlink": COMPRESSORS, "privacy": PRIVACY,
    "selection": SELECTORS, "server_optimizer": SERVER_OPTIMIZERS,
}  # fmt: skip


class RunConfig(Strict):
    """One federated simulation."""

    name: RunName = Field(
        "run", description="the run's name: its output directory out/NAME and its label in fedsim runs"
    )
    seed: int = Field(
        0, ge=0, description="seeds the data split, the model's initial weights, sampling and every random stream"
    )
    rounds: int = Field(10, ge=1, le=MAX_ROUNDS, description="at most 10 million: more is a typo, not a run")
    clients_per_round: int | None = Field(None, ge=1, description="cohort size; default all clients")
    sampling: Literal["fixed", "poisson"] = Field(
        "fixed", description="fixed-size cohorts, or each client joins with probability clients_per_round / clients"
    )
    eval_every: int = Field(1, ge=0, description="evaluate every k rounds; 0 = only after the last")
    eval_batch_size: int = Field(1024, ge=1, description="samples per batch when evaluating")
    threads: int | None = Field(None, ge=1, description="torch intra-op threads per device")
    devices: int = Field(1, ge=1, description="device pool size: ranks of torch.distributed")
    accelerator: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="where each rank trains: auto = a GPU when torch sees one (cuda:LOCAL_RANK % count)"
    )
    data_on_device_mb: float = Field(2048.0, ge=0, description="clients' data stay on the GPU up to this size (MiB)")
    progress: bool = Field(True, description="print a line every few rounds")
    data: DataConfig
    model: ModelConfig = ModelConfig()
    task: TaskConfig = TaskConfig()
    algorithm: SerializeAsAny[AlgorithmBase] = Field(default_factory=default_algorithm)
    executor: ExecutorConfig = ExecutorConfig()
    state: StateConfig = StateConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    emulation: EmulationConfig = EmulationConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    federated_eval: FederatedEvalConfig = FederatedEvalConfig()
    control: ControlConfig = FixedControl()
    privacy: SerializeAsAny[PrivacyConfig] = Field(default_factory=lambda: PRIVACY.parse({}))
    secagg: SecAggConfig = SecAggConfig()
    aggregator: SerializeAsAny[AggregatorConfig] = Field(default_factory=lambda: AGGREGATORS.parse({}))
    attack: SerializeAsAny[AttackConfig] = Field(default_factory=lambda: ATTACKS.parse({}))
    uplink: SerializeAsAny[CompressorConfig] = Field(default_factory=lambda: COMPRESSORS.parse({}))
    downlink: SerializeAsAny[CompressorConfig] = Field(default_factory=lambda: COMPRESSORS.parse({}, "downlink"))
    coreset: CoresetConfig = CoresetConfig()
    selection: SerializeAsAny[SelectionConfig] = Field(default_factory=lambda: SELECTORS.parse({}))
    server_optimizer: SerializeAsAny[ServerOptimizerConfig] = Field(default_factory=lambda: SERVER_OPTIMIZERS.parse({}))
    server_stages: list[SerializeAsAny[ServerStageConfig]] = Field(
        default_factory=list, description="your own server steps, each at a named point of the round"
    )
    topology: TopologyConfig = TopologyConfig()
    asynchronous: AsyncConfig = AsyncConfig()
    clock: ClockConfig = ClockConfig()
    tracking: TrackingConfig = TrackingConfig()
    format: Literal[2] = Field(2, description="the config format: without it, older spellings load (format 1)")

    @model_validator(mode="before")
    @classmethod
    def _respelled(cls, value: Any) -> Any:
        """A format-1 config's spellings (``algorithm.name``, the old offs, the server step as ``algorithm.name:
        fedadam`` or ``algorithm.server_lr``) moved to today's, with a note of each (fedsim.config.respell)."""
        return today_spelled(value, decentralised_kind) if isinstance(value, dict) else value

    @field_validator("algorithm", mode="before")
    @classmethod
    def _registered_algorithm(cls, value: Any) -> AlgorithmBase:
        return parse_algorithm(value)

    @field_validator("server_stages", mode="before")
    @classmethod
    def _registered_server_stages(cls, value: Any) -> list[ServerStageConfig]:
        return parse_server_stages(value)

    @field_validator(*STAGES, mode="before")
    @classmethod
    def _registered_stage(cls, value: Any, info: ValidationInfo) -> StageConfig:
        """Each stage section by the settings class its ``kind`` (or ``factory``) names in its registry."""
        return STAGES[str(info.field_name)].parse(value, str(info.field_name))

    @model_validator(mode="after")
    def _cohort_fits(self) -> RunConfig:
        if self.emulation.slowdown and len(self.emulation.slowdown) != self.devices:
            raise ValueError(
                f"emulation.slowdown has {len(self.emulation.slowdown)} factors for devices={self.devices}"
            )
        if self.clients_per_round is not None and self.clients_per_round > self.data.clients:
            raise ValueError(f"clients_per_round={self.clients_per_round} exceeds data.clients={self.data.clients}")
        return self

    @model_validator(mode="after")
    def _privacy_fits(self) -> RunConfig:
        secagg = self.secagg
        if (
            secagg.enabled
            and self.sampling == "fixed"
            and self.cohort_size * (secagg.quantization_range + 1) > (secagg.modulus_range)
        ):
            raise ValueError(
                f"secagg: the sum of {self.cohort_size} updates quantized into quantization_range="
                f"{secagg.quantization_range} overflows modulus_range={secagg.modulus_range}; raise modulus_range"
            )
        if secagg.enabled and self.sampling == "fixed" and self.cohort_size < secagg.reconstruction_threshold:
            raise ValueError(
                f"secagg.reconstruction_threshold={secagg.reconstruction_threshold} exceeds the cohort"
                f" ({self.cohort_size} clients): no secret could be recovered"
            )
        knob = self.control.knob
        if secagg.enabled and knob is not None and knob.name == "topk":
            raise ValueError("secagg: a masked update is dense, so control.knob.name=topk cannot compress it")
        if secagg.enabled and self.uplink.enabled:
            raise ValueError(f"secagg: a masked update is dense, so uplink.kind={self.uplink.kind} cannot compress it")
        compressed = self.uplink.kind if self.uplink.enabled else "topk" if knob and knob.name == "topk" else None
        if self.privacy.local and compressed is not None:  # central DP clips the decoded message
            raise ValueError(
                f"privacy.kind={self.privacy.kind} adds dense noise to each client's message, which"
                f" uplink.kind={compressed} would then have to send dense; use privacy.kind=central beside a compressor"
            )
        if (refusal := private_run_refusal(self)) is not None:
            raise ValueError(refusal)
        return self

    @model_validator(mode="after")
    def _topology_fits(self) -> RunConfig:
        gossip, name = type(self.algorithm).decentralised, self.algorithm.kind
        graph = type(self.algorithm).over_topology  # LGD picks its own graph: the leaders, every period
        if gossip and not graph and self.topology.enabled:
            raise ValueError(
                f"algorithm.kind={name} mixes with its leaders, not over topology.kind={self.topology.kind}"
            )
        if graph != self.topology.enabled:
            if gossip:
                raise ValueError(f"algorithm.kind={name} gossips between neighbours: set topology.kind")
            raise ValueError(
                f"topology.kind={self.topology.kind} needs a decentralised algorithm (dpsgd, dmsgd,"
                f" decentlam), not {name}"
            )
        nodes = self.topology.nodes
        if nodes is not None and not gossip:
            raise ValueError(f"topology.nodes is a decentralised run's; algorithm.kind={name} has a server")
        if nodes is not None and nodes > self.data.clients:
            raise ValueError(f"topology.nodes={nodes} exceeds data.clients={self.data.clients}: a node is 1+ clients")
        if not gossip:
            return self
        federated = self._update_sections() | {  # sections of a federated round a server-less run has no place for
            "coreset": self.coreset.enabled,
            "federated_eval": self.federated_eval.enabled,
            "clients_per_round": self.clients_per_round not in (None, self.data.clients),
        }
        for section, used in federated.items():
            if used:
                raise ValueError(
                    f"{section}: a decentralised run (algorithm.kind={name}) does not support it: every node"
                    " trains every round and mixes with its neighbours, with no server"
                )
        return self

    @model_validator(mode="after")
    def _leaders_fit(self) -> RunConfig:
        if not type(self.algorithm).elects_leaders:
            return self
        for section, used in self._update_sections().items():  # its clients send a loss each, no model update
            if used:
                raise ValueError(
                    f"{section}: algorithm.kind={self.algorithm.kind} adopts its elected leaders' models; its"
                    " clients send a loss each, not a model update"
                )
        return self

    @model_validator(mode="after")
    def _asynchronous_fits(self) -> RunConfig:
        """What the asynchronous server does not account for or define yet, one line each."""
        mode = self.asynchronous.kind
        if mode == "none":
            return self
        if self.decentralised:
            raise ValueError(f"asynchronous.kind={mode} needs a server: algorithm.kind={self.algorithm.kind} has none")
        if (refusal := asynchronous_refusal(self)) is not None:
            raise ValueError(refusal)
        if self.clients_per_round is not None:
            raise ValueError(
                f"clients_per_round: asynchronous.kind={mode} has no cohort: asynchronous.concurrency clients train"
                " at a time and asynchronous.buffer updates make a step (set clients_per_round: null)"
            )
        if self.asynchronous.concurrency > self.data.clients:
            raise ValueError(
                f"asynchronous.concurrency={self.asynchronous.concurrency} exceeds data.clients={self.data.clients}:"
                " a client trains one task at a time"
            )
        return self

    def _update_sections(self) -> dict[str, bool]:
        """Whether each section that compresses, noises, masks, robustly combines, attacks or tunes the clients'
        model updates is in use."""
        return {
            "uplink": self.uplink.enabled,
            "downlink": self.downlink.enabled,
            "privacy": self.privacy.enabled,
            "secagg": self.secagg.enabled,
            "aggregator": self.aggregator.enabled,
            "attack": self.attack.enabled,
            "control": self.control.enabled,
            "server_stages": bool(self.server_stages),
        }

    @property
    def decentralised(self) -> bool:
        """Whether the run is server-less: its nodes keep their models and mix them (fedsim.decentralised.gossip)."""
        return type(self.algorithm).decentralised

    @model_validator(mode="after")
    def _selection_fits(self) -> RunConfig:
        mode, name = self.asynchronous.kind, self.algorithm.kind
        elsewhere = f"asynchronous.kind={mode}" if mode != "none" else None
        elsewhere = f"a decentralised run (algorithm.kind={name})" if self.decentralised else elsewhere
        private = self.privacy.enabled
        facts = (self.cohort_size, self.data.clients, self.sampling, private, elsewhere, self.clock.kind == "trace")
        if refusal := self.selection.refusal(*facts):
            raise ValueError(refusal)
        return self

    @model_validator(mode="after")
    def _clock_fits(self) -> RunConfig:
        if (refusal := clock_refusal(self)) is not None:
            raise ValueError(refusal)
        return self

    @model_validator(mode="after")
    def _server_optimizer_fits(self) -> RunConfig:
        if (refusal := server_optimizer_refusal(self)) is not None:
            raise ValueError(refusal)
        return self

    @model_validator(mode="after")
    def _coreset_fits(self) -> RunConfig:
        if self.coreset.enabled and self.task.kind != "classification":
            raise ValueError(
                f"coreset.kind={self.coreset.kind} chooses class by class: it needs task.kind classification,"
                f" not {self.task.kind}"
            )
        return self

    @model_validator(mode="after")
    def _text_fits(self) -> RunConfig:
        if (refusal := text_refusal(self.data, self.model.path, self.task.kind, self.task.ignore_index)) is not None:
            raise ValueError(refusal)
        return self

    @model_validator(mode="after")
    def _knob_fits(self) -> RunConfig:
        """A compressor's knob needs an uplink whose settings declare that knob (the topk knob alone: top-k)."""
        knob, uplink = self.control.knob, self.uplink
        if knob is None or knob.name not in COMPRESSOR_KNOBS or type(uplink).knob == knob.name:
            return self
        if knob.name == "topk" and not uplink.enabled:
            return self
        takers = COMPRESSORS.kinds_declaring(lambda config: config.knob == knob.name)
        raise ValueError(
            f"control.knob.name={knob.name} tunes uplink.kind={' or '.join(takers)}, but uplink.kind is {uplink.kind}"
        )

    @model_validator(mode="after")
    def _aggregator_fits(self) -> RunConfig:
        """The attack and the rule beside the other stages, from what each declares of itself."""
        rule, attack = self.aggregator, self.attack
        if attack.enabled and round(attack.fraction * self.data.clients) == 0:
            raise ValueError(
                f"attack.fraction={attack.fraction:g} of data.clients={self.data.clients} rounds to 0 malicious"
                f" clients; use attack.fraction={1 / self.data.clients:.3g} or more"
            )
        if attack.needs_classes and self.task.kind != "classification":
            raise ValueError(f"attack.kind={attack.kind} rewrites class labels: task.kind={self.task.kind} has none")
        if attack.reads_honest and (self.privacy.enabled or self.secagg.enabled):
            raise ValueError(f"attack.kind={attack.kind} reads the honest updates: not beside privacy or secagg")
        if attack.enabled and attack.fraction >= 0.5 and rule.assumes_minority:
            raise ValueError(
                f"attack.fraction={attack.fraction}: aggregator.kind={rule.kind} assumes a minority of attackers"
            )
        for stage in self.server_stages:  # your own server steps see what the server sees
            if (refusal := stage.refusal(self.secagg.enabled, self.privacy)) is not None:
                raise ValueError(refusal)
            if (refusal := stage.rule_refusal(rule, self.algorithm)) is not None:
                raise ValueError(refusal)
        if not rule.enabled:
            return self
        if rule.gathers and self.secagg.enabled:
            raise ValueError(f"aggregator.kind={rule.kind} needs every update, which secagg hides from the server")
        if self.privacy.enabled and not (rule.per_client and rule.keeps_clip):  # DP releases a noised sum of
            raise ValueError(  # clipped updates: a rule that lengthens one, or replaces the sum, breaks it
                f"aggregator.kind={rule.kind} beside privacy is not supported yet: use one or the other"
            )
        cohort = self.asynchronous.buffer if self.asynchronous.enabled else self.cohort_size  # what a rule sees
        if (refusal := rule.cohort_refusal(cohort, fixed=self.sampling == "fixed")) is not None:
            raise ValueError(refusal)
        if attack.enabled and (limit := rule.tolerated(cohort)) is not None:
            expected = cohort * round(attack.fraction * self.data.clients) / self.data.clients
            if expected > limit:
                raise ValueError(
                    f"attack.fraction={attack.fraction:g} puts {expected:.3g} attackers in an average round of"
                    f" {cohort} clients; aggregator.kind={rule.kind} withstands {limit}"
                    f" ({rule.tolerance_setting()})"
                )
        return self

    def attackers_warning(self) -> str | None:
        """One line when 1% or more of the rounds will hold more attackers than the rule withstands (a run whose
        average round holds more is refused by the settings check), and one for each way the server's rule differs
        from the rule the attack says it is tailored to; None when there is nothing to say."""
        from fedsim.config.attackers import assumption_warnings, attackers_warning

        lines = [*assumption_warnings(self.attack, self.aggregator), attackers_warning(self)]
        return "\n".join(line for line in lines if line) or None

    @property
    def cohort_size(self) -> int:
        return self.clients_per_round or self.data.clients


def saved_tree(tree: dict[str, Any]) -> dict[str, Any]:
    """A run's saved config.json, readable again: one written before each stage kind had its own settings
    class holds every kind's settings in ``attack``, ``aggregator``, ``uplink`` and ``downlink`` (all validated
    then, those of other kinds ignored); each section keeps its kind's own. A format-2 file is today's."""
    out = dict(tree)
    if out.get("format", 1) != 1:
        return out
    for section, registry in STAGES.items():
        if section == "privacy":  # its kinds share one settings class: nothing of another kind to drop
            continue
        value = out.get(section)
        if isinstance(value, dict) and value.get("factory") is None:
            entry = registry.entry(str(value.get("kind", registry.default)))
            if entry is not None:
                out[section] = {k: v for k, v in value.items() if k in entry.config.model_fields}
    return out


def parse_config(tree: dict[str, Any]) -> RunConfig:
    """Validate a plain tree into a :class:`RunConfig`, or raise :class:`ConfigError` with one line."""
    return validate(RunConfig, tree)


def load_config(
    path: str | Path, overrides: list[str] | tuple[str, ...] = (), unsets: list[str] | tuple[str, ...] = ()
) -> RunConfig:
    """Read a YAML run file, remove the dotted keys of ``unsets``, apply ``key=value`` overrides, validate, and
    name the run by what the overrides changed (:func:`named_by_overrides`); raises :class:`ConfigError`."""
    tree = load_tree(path, overrides, unsets)
    try:
        tree = today_spelled(tree, decentralised_kind)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    switch_variants(tree, overrides, RunConfig)  # --set data.dataset=mnist drops the old dataset's settings
    return renamed(parse_config(tree), overrides)
