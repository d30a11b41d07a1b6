"""The mechanics every fedsim config shares: strict frozen models, ``--set`` overrides, one-line errors.

A run is described by one YAML file plus ``--set key=value`` overrides. Every model forbids unknown keys, so a
typo is an error rather than a silently ignored setting; :func:`validate` turns the first validation error into
one line that names the field and what is allowed.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Annotated, Any, TypeVar

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator

from fedsim.config.respell import SpellingNote, override_respelled


class ConfigError(ValueError):
    """A bad configuration file, field or override; the message is one line meant for the user."""


class RunFailed(RuntimeError):
    """The run failed partway (code of your own raised in a round): the message names what, where and why.
    Here, beside :class:`ConfigError`, so that code below the simulator (an attack's reported loss) can raise
    it; :mod:`fedsim.sim.persist.failed` says what the command line does with it."""


MAX_INT = 2**53  # every integer in a config: exact in JSON, in float64 and in SQLite
MAX_SEED = 2**32 - 1  # numpy's and scikit-learn's seeds
MAX_CONFIG_BYTES = 1 << 20
MAX_VALUES = 100_000  # values in a config once YAML aliases are expanded
MAX_NESTING = 32  # YAML collections inside each other; a config needs a handful


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every number finite

    @field_validator("*", mode="after")
    @classmethod
    def _bounded_int(cls, value: Any, info: ValidationInfo) -> Any:
        """Integers a run can store and seed with: no field takes more than 2**53, a seed no more than 2**32-1."""
        if isinstance(value, int) and not isinstance(value, bool):
            limit = MAX_SEED if info.field_name == "seed" else MAX_INT
            if abs(value) > limit:
                raise ValueError(f"must be at most {limit}")
        return value


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def _run_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(
            "a run name is 1-100 letters, digits, '.', '_' or '-', starting with a letter or digit "
            "(it names the output directory and the run id)"
        )
    return value


RunName = Annotated[str, AfterValidator(_run_name)]


M = TypeVar("M", bound=BaseModel)


class SubConfigError(ValueError):
    """A section chosen at validation time (an algorithm by its ``name``) failed its own validation.

    Raised inside a validator so that :func:`format_error` can name the bad field inside the section
    (``algorithm.lr``) and list what that section allows, as for any other section.
    """

    def __init__(self, inner: ValidationError, model: type[BaseModel]) -> None:
        super().__init__(str(inner))
        self.inner = inner
        self.model = model


def apply_override(tree: dict[str, Any], assignment: str) -> None:
    """Apply one ``dotted.key=value`` override in place; the value is parsed as YAML (``0.1`` is a float)."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {assignment!r}: expected key=value, e.g. --set algorithm.lr=0.1")
    try:
        value = _safe_yaml(raw, f"--set {key}") if raw.strip() else raw
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {key}: value {raw!r} is not valid YAML ({exc.__class__.__name__})") from exc
    set_dotted(tree, key.strip(), value, "--set ")


def unset_dotted(tree: dict[str, Any], key: str) -> None:
    """Remove dotted ``key`` from ``tree`` (``--unset algorithm.momentum``: a setting another value of a
    ``kind`` or ``name`` does not take); a key the tree does not hold is one ConfigError naming what it holds."""
    parts = key.strip().split(".")
    node: Any = tree
    for i, part in enumerate(parts):
        if not isinstance(node, dict) or part not in node:
            at = ".".join(parts[:i]) or "the top level"
            held = ", ".join(node) if isinstance(node, dict) and node else "nothing"
            raise ConfigError(f"--unset {key}: the config has no {part!r} at {at} (it holds {held})")
        if i == len(parts) - 1:
            del node[part]
        else:
            node = node[part]


def set_dotted(tree: dict[str, Any], key: str, value: Any, where: str) -> None:
    """``tree[a][b][c] = value`` for ``key`` ``a.b.c``, making sections as needed; a part that is a value, not a
    section, is one ConfigError (``where`` names what set it: ``--set``, ``grid.``)."""
    parts = key.split(".")
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{where}{key}: {'.'.join(parts[: i + 1])} is not a section")
        node = child
    node[parts[-1]] = value


# overrides that change how a run runs or where its files are, not what it is: they add nothing to its name
HOW_NOT_WHAT = ("name", "progress", "threads", "devices", "eval_every", "eval_batch_size", "accelerator", "tracking")
WHERE = ("dir", "path", "trace")  # a key ending so names where something lives (data.dir, clock.trace.path)
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
NamedT = TypeVar("NamedT", bound=BaseModel)


def named_by_overrides(name: str, overrides: list[str] | tuple[str, ...]) -> str:
    """The run name that says what ``--set`` changed: ``quickstart`` with ``--set algorithm.lr=0.1 --set
    rounds=5`` is ``quickstart-lr0.1-rounds5``, so runs of one config are told apart and get folders of their
    own; a key whose last part another override shares keeps the dotted part that tells them apart
    (``uplink.kindqsgd-downlink.kindef_sign``). An explicit ``--set name=...`` wins; overrides of how a run runs
    (threads, devices, progress, evaluation's cadence, tracking, where data, state and the server live,
    checkpoints) add nothing. At most 100
    characters, as every run name."""
    changed: list[tuple[str, str]] = []
    for assignment in overrides:
        key, _, value = assignment.partition("=")
        key = key.strip()
        if key == "name":
            return name
        if key in HOW_NOT_WHAT or key.startswith(("state.", "server.", "checkpoint.", "tracking.")):
            continue
        if key.rsplit(".", 1)[-1] in WHERE or key.endswith((".eval_every", ".eval_batch_size")):
            continue
        changed.append((key, value.strip()))
    keys = [key for key, _ in changed]
    parts = []
    for key, value in changed:
        part = _UNSAFE.sub("_", f"{_shortest_unique(key, keys)}{value}").strip("_")
        if part:
            parts.append(part)
    return "-".join([name, *parts])[:100]


def _shortest_unique(key: str, keys: list[str]) -> str:
    """The fewest trailing parts of dotted ``key`` that no other key of ``keys`` ends with."""
    parts = key.split(".")
    others = [k.split(".") for k in keys if k != key]
    for n in range(1, len(parts) + 1):
        if not any(other[-n:] == parts[-n:] for other in others):
            return ".".join(parts[-n:])
    return key


def renamed(cfg: NamedT, overrides: list[str] | tuple[str, ...]) -> NamedT:
    """``cfg`` named by :func:`named_by_overrides` (a frozen copy; the name stays a valid run name)."""
    current = str(cfg.model_dump(include={"name"})["name"])
    name = named_by_overrides(current, overrides)
    return cfg if name == current else cfg.model_copy(update={"name": name})


def union_members(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside a (possibly Annotated) union annotation."""
    found: list[type[BaseModel]] = []
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            found.append(arg)
        else:
            found.extend(union_members(arg))
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
        members = union_members(ann) or union_members(field.rebuild_annotation())
        if len(members) == 1:  # an optional section (Model | None): no tag in the location
            model = members[0]
            continue
        tag = items.pop(0) if members and items else None
        model = next((m for m in members if tag in _tags(m)), None)
    return ".".join(path), model


def _tags(model: type[BaseModel]) -> set[str]:
    tags: set[str] = set()
    for field in model.model_fields.values():
        tags.update(a for a in getattr(field.annotation, "__args__", ()) if isinstance(a, str))
    return tags


def format_error(exc: ValidationError, root: type[BaseModel], prefix: tuple[str, ...] = ()) -> str:
    """One line naming the first bad field of a ``root`` model and what is allowed."""
    errors = exc.errors()
    err = errors[0]
    more = len(errors) - 1
    tail = f" (and {more} more error{'s' * (more > 1)})" if more else ""
    where, owner = _walk(tuple(err["loc"]), root)
    nested = (err.get("ctx") or {}).get("error")
    if isinstance(nested, SubConfigError):
        return format_error(nested.inner, nested.model, (*prefix, where)) + tail
    where = ".".join(p for p in (*prefix, where) if p)
    if err["type"] == "extra_forbidden":
        allowed = ", ".join(owner.model_fields) if owner is not None else "see the docs"
        return f"unknown key {where!r}; allowed here: {allowed}{tail}"
    if err["type"] == "missing":
        return f"{where}: required field is missing{tail}"
    msg = err["msg"].removeprefix("Value error, ")
    if where and msg.startswith((f"{where}: ", f"{where}.")):  # the message names its field already
        where = ""
    value = err.get("input")
    shown = "" if isinstance(value, dict | list) or value is None else f" (got {value!r})"
    return f"{where}: {msg}{shown}{tail}" if where else f"{msg}{tail}"


def _depth(node: Any, level: int = 0) -> int:
    if level > MAX_NESTING:
        return level
    if isinstance(node, dict):
        return max((_depth(v, level + 1) for v in node.values()), default=level + 1)
    if isinstance(node, list):
        return max((_depth(v, level + 1) for v in node), default=level + 1)
    return level


def _safe_yaml(text: str, where: str | Path) -> Any:
    """``yaml.safe_load``, refusing a document whose aliases expand it past ``MAX_VALUES`` values (a "billion
    laughs": nine nested aliases of nine make 10**9) before anything walks it."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        sizes: dict[int, int] = {}

        def size(node: yaml.Node) -> int:  # values once aliases are expanded; each node counted once
            if id(node) not in sizes:
                sizes[id(node)] = 0  # a recursive alias counts as nothing more
                children = node.value if isinstance(node, yaml.SequenceNode) else []
                if isinstance(node, yaml.MappingNode):
                    children = [n for pair in node.value for n in pair]
                sizes[id(node)] = min(1 + sum(size(c) for c in children), MAX_VALUES + 1)
            return sizes[id(node)]

        if size(root) > MAX_VALUES:
            raise ConfigError(f"{where}: its YAML aliases expand to more than {MAX_VALUES:,} values: not a config")
        return loader.construct_document(root)
    finally:
        loader.dispose()


def validate(model: type[M], tree: dict[str, Any]) -> M:
    """Validate a plain tree into ``model``, or raise :class:`ConfigError` with one line."""
    try:
        return model.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(format_error(exc, model)) from None


def load_tree(
    path: str | Path, overrides: list[str] | tuple[str, ...] = (), unsets: list[str] | tuple[str, ...] = ()
) -> dict[str, Any]:
    """Read a YAML mapping, remove each dotted key of ``unsets``, then apply ``key=value`` overrides; raises
    :class:`ConfigError`."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: {path.stat().st_size} bytes is not a config (at most {MAX_CONFIG_BYTES})")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}): a config is a YAML file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config ({exc.strerror})") from None
    try:
        tree = _safe_yaml(text, path) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}: invalid YAML{at}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a config") from None
    if _depth(tree) > MAX_NESTING:
        raise ConfigError(f"{path}: nested more than {MAX_NESTING} levels deep: not a config")
    if not isinstance(tree, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level")
    apply_overrides(tree, overrides, unsets)
    return tree


def apply_overrides(
    tree: dict[str, Any], overrides: list[str] | tuple[str, ...] = (), unsets: list[str] | tuple[str, ...] = ()
) -> None:
    """Remove each dotted key of ``unsets`` from ``tree``, then apply each ``key=value`` of ``overrides``, in place;
    raises :class:`ConfigError`."""
    for key in unsets:
        unset_dotted(tree, key)
    for assignment in overrides:
        assignment, note = override_respelled(assignment)
        if note is not None:
            warnings.warn(note, SpellingNote, stacklevel=3)
        apply_override(tree, assignment)
