"""Typed, frozen configuration of a run, validated once at the edge.

A run is described by one YAML file plus ``--set key=value`` overrides. Every model forbids unknown keys, so a
typo is an error rather than a silently ignored setting; :func:`load_config` turns the first validation error
into one line that names the field and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(ValueError):
    """A bad configuration file, field or override; the message is one line meant for the user."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


M = TypeVar("M", bound=BaseModel)


# --------------------------------------------------------------------------------------------- partitions


class IidPartition(Strict):
    """Every client draws uniformly from the whole training set."""

    kind: Literal["iid"] = "iid"


class DirichletPartition(Strict):
    """Per-class client proportions from Dirichlet(alpha); small alpha means strong label skew."""

    kind: Literal["dirichlet"]
    alpha: float = Field(0.5, gt=0)


class ShardsPartition(Strict):
    """McMahan et al. 2017: sort by label, cut into shards, give each client ``labels_per_client`` shards."""

    kind: Literal["shards"]
    labels_per_client: int = Field(2, ge=1)


class LabelSkewPartition(Strict):
    """Hsieh et al. 2020: ``skew`` of the data is split by label across clients, the rest is spread iid."""

    kind: Literal["label_skew"]
    skew: float = Field(1.0, ge=0, le=1)


class QuantitySkewPartition(Strict):
    """Client sizes from Dirichlet(alpha) over clients; labels iid within a client."""

    kind: Literal["quantity_skew"]
    alpha: float = Field(1.0, gt=0)
    min_samples: int = Field(2, ge=1)


Partition = Annotated[
    IidPartition | DirichletPartition | ShardsPartition | LabelSkewPartition | QuantitySkewPartition,
    Field(discriminator="kind"),
]


# --------------------------------------------------------------------------------------------- datasets


class _DataCommon(Strict):
    clients: int = Field(100, ge=1)
    test_fraction: float = Field(0.2, gt=0, lt=1)


class DigitsData(_DataCommon):
    """scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes), offline."""

    dataset: Literal["digits"]
    partition: Partition = IidPartition()


class SyntheticData(_DataCommon):
    """LEAF/FedProx Synthetic(alpha, beta): each client has its own linear model and feature distribution."""

    dataset: Literal["synthetic"]
    alpha: float = Field(1.0, ge=0)
    beta: float = Field(1.0, ge=0)
    features: int = Field(60, ge=1)
    classes: int = Field(10, ge=2)
    mean_samples: int = Field(50, ge=2, description="mean of the lognormal client sizes (samples)")


class FileData(_DataCommon):
    """User arrays: ``.npz`` with arrays ``x`` and ``y``, or ``.csv``/``.parquet`` with a label column."""

    dataset: Literal["file"]
    path: Path
    label: str = "label"
    partition: Partition = IidPartition()

    @field_validator("path")
    @classmethod
    def _path_exists(cls, path: Path) -> Path:
        if not path.is_file():
            raise ValueError(f"data file not found: {path}")
        if path.suffix.lower() not in {".npz", ".csv", ".parquet"}:
            raise ValueError(f"unsupported data file {path.name!r}; allowed: .npz, .csv, .parquet")
        return path


class RandomData(_DataCommon):
    """Gaussian features with uniform random labels, for throughput benchmarks.

    ``lazy`` generates a client's samples from (seed, client) on each access instead of keeping them all in
    memory, so memory stays flat with the number of clients.
    """

    dataset: Literal["random"]
    samples_per_client: int = Field(64, ge=1)
    features: int = Field(784, ge=1)
    classes: int = Field(10, ge=2)
    test_samples: int = Field(1000, ge=1)
    lazy: bool = False


DataConfig = Annotated[
    DigitsData | SyntheticData | FileData | RandomData,
    Field(discriminator="dataset"),
]


# --------------------------------------------------------------------------------------------- model


class ModelConfig(Strict):
    """``logistic``: one linear layer; ``mlp``: ``hidden`` ReLU layers; ``cnn``: two conv blocks + linear."""

    kind: Literal["logistic", "mlp", "cnn"] = "mlp"
    hidden: tuple[int, ...] = (128,)
    channels: tuple[int, int] = (16, 32)
    norm: Literal["group", "batch", "none"] = "group"
    groups: int = Field(4, ge=1)

    @model_validator(mode="after")
    def _groups_divide(self) -> ModelConfig:
        if self.kind == "cnn" and self.norm == "group" and any(c % self.groups for c in self.channels):
            raise ValueError(f"groups={self.groups} must divide every channel count {list(self.channels)}")
        return self


# --------------------------------------------------------------------------------------------- algorithms


class _ClientOpt(Strict):
    """Local training shared by every algorithm: plain SGD on the client's split."""

    lr: float = Field(0.05, gt=0)
    local_epochs: int = Field(1, ge=1)
    local_steps: int | None = Field(None, ge=1, description="if set, a fixed number of SGD steps instead")
    batch_size: int = Field(16, ge=1)
    weight_decay: float = Field(0.0, ge=0)
    weighting: Literal["samples", "uniform"] = "samples"


class FedAvgConfig(_ClientOpt):
    name: Literal["fedavg"]
    server_lr: float = Field(1.0, gt=0)


class FedProxConfig(_ClientOpt):
    name: Literal["fedprox"]
    mu: float = Field(0.01, ge=0)
    server_lr: float = Field(1.0, gt=0)


class FedNovaConfig(_ClientOpt):
    name: Literal["fednova"]
    server_lr: float = Field(1.0, gt=0)


class ScaffoldConfig(_ClientOpt):
    name: Literal["scaffold"]
    server_lr: float = Field(1.0, gt=0)


class DittoConfig(_ClientOpt):
    name: Literal["ditto"]
    lam: float = Field(0.1, ge=0, description="pull of the personal model towards the global one")
    personal_lr: float | None = Field(None, gt=0)
    server_lr: float = Field(1.0, gt=0)


class FedAdamConfig(_ClientOpt):
    name: Literal["fedadam", "fedyogi"]
    server_lr: float = Field(0.01, gt=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.99, ge=0, lt=1)
    tau: float = Field(1e-3, gt=0, description="adaptivity (epsilon) of Reddi et al. 2021")


class FedAvgMConfig(_ClientOpt):
    name: Literal["fedavgm"]
    server_lr: float = Field(1.0, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)


AlgorithmConfig = Annotated[
    FedAvgConfig | FedProxConfig | FedNovaConfig | ScaffoldConfig | DittoConfig | FedAdamConfig | FedAvgMConfig,
    Field(discriminator="name"),
]


# --------------------------------------------------------------------------------------------- engine


class StateConfig(Strict):
    """Where per-client state lives: ``memory``, or ``disk`` (one safetensors file per client)."""

    backend: Literal["memory", "disk"] = "memory"
    dir: Path | None = Field(None, description="disk backend directory; default OUT/state")
    cache_mb: float = Field(256.0, ge=0, description="LRU cache of the disk backend (MiB)")
    fsync: bool = True


class SchedulerConfig(Strict):
    """How a round's clients are assigned to devices.

    ``lpt``: longest predicted time first onto the device that would finish it earliest, using a per-device
    runtime model fitted on the last ``window`` clients (even split until every device has ``warmup``
    observations); ``even``: the same number of clients per device.
    """

    kind: Literal["lpt", "even"] = "lpt"
    window: int = Field(200, ge=2)
    warmup: int = Field(4, ge=2)


class EmulationConfig(Strict):
    """Heterogeneity emulation: modelled device speeds and unreliable clients.

    ``slowdown[d]`` multiplies device d's measured seconds on the virtual clock (1 = as measured, 2 = half as
    fast); ``availability`` is the chance a client can be sampled in a round; ``dropout`` the chance a sampled
    client drops out and contributes nothing (its state stays as it was).
    """

    slowdown: tuple[float, ...] = ()
    availability: float = Field(1.0, gt=0, le=1)
    dropout: float = Field(0.0, ge=0, lt=1)

    @field_validator("slowdown")
    @classmethod
    def _positive(cls, slowdown: tuple[float, ...]) -> tuple[float, ...]:
        if any(f <= 0 for f in slowdown):
            raise ValueError(f"every slow-down factor must be > 0, got {list(slowdown)}")
        return slowdown


class CheckpointConfig(Strict):
    """Crash-safe checkpoints every ``every`` rounds (0 = none), keeping the newest ``keep``."""

    every: int = Field(0, ge=0)
    keep: int = Field(2, ge=1)


class KnobConfig(Strict):
    """The communication knob SkewScout turns: its settings from the tightest (most traffic) to the loosest.

    ``local_steps``: SGD steps per client per round (1 = communicate every step); an increasing ladder of
    whole numbers. ``tau`` (split fine-tuning with several cloud regions): steps between adapter averages,
    likewise. ``topk``: the fraction of each client's update it uploads (top-k with error feedback; the
    rest waits in the client's residual); a decreasing ladder in (0, 1]. Default ladders: 1..64 steps, or
    1.0 down to 0.01 of the entries.
    """

    name: Literal["local_steps", "topk", "tau"] = "local_steps"
    ladder: list[float] | None = None
    start: int | None = Field(None, ge=0, description="rung to start on; default the loosest")

    @model_validator(mode="after")
    def _ladder(self) -> KnobConfig:
        ladder = self.rungs
        if not ladder:
            raise ValueError("knob.ladder needs at least one setting")
        if self.name in ("local_steps", "tau"):
            if ladder[0] < 1 or any(v != int(v) for v in ladder) or sorted(set(ladder)) != ladder:
                raise ValueError(f"knob.ladder of {self.name} must be increasing whole numbers >= 1, got {ladder}")
        elif not all(0 < v <= 1 for v in ladder) or sorted(set(ladder), reverse=True) != ladder:
            raise ValueError(f"knob.ladder of topk must be decreasing fractions in (0, 1], got {ladder}")
        if self.start is not None and self.start >= len(ladder):
            raise ValueError(f"knob.start={self.start} is outside the ladder of {len(ladder)} settings")
        return self

    @property
    def rungs(self) -> list[float]:
        if self.ladder is not None:
            return list(self.ladder)
        if self.name in ("local_steps", "tau"):
            return [1, 2, 4, 8, 16, 32, 64]
        return [1.0, 0.5, 0.25, 0.1, 0.05, 0.02, 0.01]

    @property
    def start_rung(self) -> int:
        return len(self.rungs) - 1 if self.start is None else self.start


class FixedControl(Strict):
    """No tuning: with a knob, its ``start`` rung for the whole run; without one, the algorithm's own setting."""

    kind: Literal["fixed"] = "fixed"
    knob: KnobConfig | None = None
    budget_steps: int | None = Field(None, ge=1, description="stop once each client took this many SGD steps")


class SkewScoutControl(Strict):
    """Hsieh et al. 2020: estimate the skew-induced accuracy loss by model traveling, keep it in ``target``."""

    kind: Literal["skewscout"]
    target: tuple[float, float] = Field((1.0, 3.0), description="[low, high] accuracy points")
    probe_every: int = Field(5, ge=1, description="rounds between probes")
    pairs: int = Field(4, ge=1, description="(i, j) partition pairs scored per probe")
    sample: int = Field(64, ge=1, description="examples of j's training data each pair is scored on")
    smoothing: float = Field(0.5, gt=0, le=1, description="weight of the newest probe in the estimate")
    knob: KnobConfig = KnobConfig()
    budget_steps: int | None = Field(None, ge=1, description="stop once each client took this many SGD steps")

    @field_validator("target")
    @classmethod
    def _band(cls, target: tuple[float, float]) -> tuple[float, float]:
        if not 0 <= target[0] < target[1]:
            raise ValueError(f"target [low, high] needs 0 <= low < high, got {list(target)}")
        return target


ControlConfig = Annotated[FixedControl | SkewScoutControl, Field(discriminator="kind")]


class RunConfig(Strict):
    """One federated simulation."""

    name: str = "run"
    seed: int = Field(0, ge=0)
    rounds: int = Field(10, ge=1)
    clients_per_round: int | None = Field(None, ge=1, description="cohort size; default all clients")
    eval_every: int = Field(1, ge=0, description="evaluate every k rounds; 0 = only after the last")
    eval_batch_size: int = Field(1024, ge=1)
    threads: int | None = Field(None, ge=1, description="torch intra-op threads per device")
    devices: int = Field(1, ge=1, description="device pool size: ranks of torch.distributed")
    progress: bool = True
    data: DataConfig
    model: ModelConfig = ModelConfig()
    algorithm: AlgorithmConfig = FedAvgConfig(name="fedavg")
    state: StateConfig = StateConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    emulation: EmulationConfig = EmulationConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    control: ControlConfig = FixedControl()

    @model_validator(mode="after")
    def _cohort_fits(self) -> RunConfig:
        if self.emulation.slowdown and len(self.emulation.slowdown) != self.devices:
            raise ValueError(
                f"emulation.slowdown has {len(self.emulation.slowdown)} factors for devices={self.devices}"
            )
        if self.clients_per_round is not None and self.clients_per_round > self.data.clients:
            raise ValueError(f"clients_per_round={self.clients_per_round} exceeds data.clients={self.data.clients}")
        return self

    @property
    def cohort_size(self) -> int:
        return self.clients_per_round or self.data.clients


# --------------------------------------------------------------------------------------------- loading


def apply_override(tree: dict[str, Any], assignment: str) -> None:
    """Apply one ``dotted.key=value`` override in place; the value is parsed as YAML (``0.1`` is a float)."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {assignment!r}: expected key=value, e.g. --set algorithm.lr=0.1")
    parts = key.strip().split(".")
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"--set {key}: {'.'.join(parts[: i + 1])} is not a section")
        node = child
    try:
        node[parts[-1]] = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({exc.__class__.__name__})") from exc


def _union_members(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside a (possibly Annotated) union annotation."""
    found: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            found.append(arg)
        else:
            found.extend(_union_members(arg))
    return found


def _walk(loc: tuple[int | str, ...], root: type[BaseModel]) -> tuple[str, type[BaseModel] | None]:
    """The dotted field path of a pydantic error location, without union tags, and the model owning it.

    Discriminated unions put the tag value ('fedavg', 'dirichlet', ...) into error locations; a user never
    wrote that key, so it is dropped from the path.
    """
    path: list[str] = []
    model: type[BaseModel] | None = root
    items = list(loc)
    while items:
        part = items.pop(0)
        path.append(str(part))
        if not items:
            break
        field = model.model_fields.get(str(part)) if model is not None else None
        if field is None:
            model = None
            continue
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
            continue
        members = _union_members(ann) or _union_members(field.rebuild_annotation())
        tag = items.pop(0) if members and items else None
        model = next((m for m in members if tag in _tags(m)), None)
    return ".".join(path), model


def _tags(model: type[BaseModel]) -> set[str]:
    tags: set[str] = set()
    for field in model.model_fields.values():
        tags.update(a for a in getattr(field.annotation, "__args__", ()) if isinstance(a, str))
    return tags


def format_error(exc: ValidationError, root: type[BaseModel] | None = None) -> str:
    """One line naming the first bad field of a ``root`` (default :class:`RunConfig`) and what is allowed."""
    errors = exc.errors()
    err = errors[0]
    more = len(errors) - 1
    tail = f" (and {more} more error{'s' * (more > 1)})" if more else ""
    where, owner = _walk(tuple(err["loc"]), root or RunConfig)
    if err["type"] == "extra_forbidden":
        allowed = ", ".join(owner.model_fields) if owner is not None else "see the docs"
        return f"unknown key {where!r}; allowed here: {allowed}{tail}"
    if err["type"] == "missing":
        return f"{where}: required field is missing{tail}"
    msg = err["msg"].removeprefix("Value error, ")
    value = err.get("input")
    shown = "" if isinstance(value, dict | list) or value is None else f" (got {value!r})"
    return f"{where}: {msg}{shown}{tail}" if where else f"{msg}{tail}"


def validate(model: type[M], tree: dict[str, Any]) -> M:
    """Validate a plain tree into ``model``, or raise :class:`ConfigError` with one line."""
    try:
        return model.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(format_error(exc, model)) from None


def parse_config(tree: dict[str, Any]) -> RunConfig:
    """Validate a plain tree into a :class:`RunConfig`, or raise :class:`ConfigError` with one line."""
    return validate(RunConfig, tree)


def load_tree(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """Read a YAML mapping and apply ``key=value`` overrides; raises :class:`ConfigError`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        tree = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: invalid YAML{at}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level")
    for assignment in overrides:
        apply_override(tree, assignment)
    return tree


def load_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """Read a YAML run file, apply ``key=value`` overrides, validate; raises :class:`ConfigError`."""
    return parse_config(load_tree(path, overrides))
