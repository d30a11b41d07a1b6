"""The mechanics every fedsim config shares: strict frozen models, ``--set`` overrides, one-line errors.

A run is described by one YAML file plus ``--set key=value`` overrides. Every model forbids unknown keys, so a
typo is an error rather than a silently ignored setting; :func:`validate` turns the first validation error into
one line that names the field and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError


class ConfigError(ValueError):
    """A bad configuration file, field or override; the message is one line meant for the user."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # every number finite


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
    value = err.get("input")
    shown = "" if isinstance(value, dict | list) or value is None else f" (got {value!r})"
    return f"{where}: {msg}{shown}{tail}" if where else f"{msg}{tail}"


def validate(model: type[M], tree: dict[str, Any]) -> M:
    """Validate a plain tree into ``model``, or raise :class:`ConfigError` with one line."""
    try:
        return model.model_validate(tree)
    except ValidationError as exc:
        raise ConfigError(format_error(exc, model)) from None


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
