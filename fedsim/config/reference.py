"""The configuration reference, generated from the pydantic models (the docs site's
``reference/configuration.md`` is this text): every section, its fields with their types, defaults, bounds and
descriptions, and for each registered kind of a stage section (an algorithm, an attack, a rule, a compressor,
a DP mechanism) the fields that kind adds."""

from __future__ import annotations

import re
import typing
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from fedsim.config.algorithm import algorithm_entry, algorithm_names
from fedsim.config.registry import StageConfig
from fedsim.config.run import STAGES, RunConfig


def _type(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if typing.get_origin(annotation) is None else None
    shown = text if text and not typing.get_args(annotation) else str(annotation)
    for noise in ("typing.", "pathlib.", "collections.abc.", "NoneType"):
        shown = shown.replace(noise, "None" if noise == "NoneType" else "")
    shown = re.sub(r"fedsim\.config\.(\w+\.)*", "", shown)
    shown = re.sub(r"Annotated\[([^,\[\]]+), [^\]]*\]", r"\1", shown)  # a validator's function is no type
    shown = re.sub(r"Optional\[(.*)\]$", r"\1 | None", shown)
    return shown.replace("|", "\\|")


def _tag_description(name: str, info: FieldInfo) -> str:
    """What a field says when it says nothing itself: a variant's one-value tag (``kind: dirichlet``) selects
    it, and a nested section's settings are listed under its own heading."""
    values = typing.get_args(info.annotation) if typing.get_origin(info.annotation) is typing.Literal else ()
    if len(values) == 1:
        return f"selects this {name}"
    nested = _model(info.annotation) or _model(_without_none(info.annotation)) or _members(info.annotation)
    return f"the `{name}` settings, listed below" if nested else ""


def _bounds(info: FieldInfo) -> str:
    marks = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >=", "max_length": "length <="}
    found = []
    for item in info.metadata:
        for name, sign in marks.items():
            value = getattr(item, name, None)
            if value is not None:
                found.append(f"{sign} {value}")
    return ", ".join(found)


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    if info.default_factory is not None:
        return "(see below)"
    value = info.default
    if isinstance(value, BaseModel):
        return "(see below)"
    return f"`{value!r}`" if value is not None else "`None`"


def _members(annotation: Any) -> list[type[BaseModel]]:
    """The models of a union section (``data``, ``control``), each one kind of it."""
    return [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]


def _tag(model: type[BaseModel]) -> str:
    """``dataset: digits``: the field whose one literal value names this member of a union."""
    for name, info in model.model_fields.items():
        values = typing.get_args(info.annotation) if typing.get_origin(info.annotation) is typing.Literal else ()
        if len(values) == 1:
            return f"{name}: {values[0]}"
    return model.__name__


def _model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _table(model: type[BaseModel], skip: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """One row per field: its type, default, bounds and description."""
    rows = ["| field | type | default | bounds | what it is |", "|---|---|---|---|---|"]
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        description = (info.description or _tag_description(name, info)).replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{name}` | {_type(info.annotation)} | {_default(info)} | {_bounds(info)} | {description} |")
    return rows if len(rows) > 2 else ["No settings of its own."]


def _section(
    path: str,
    model: type[BaseModel],
    level: int,
    title: str | None = None,
    skip: frozenset[str] = frozenset(),
    seen: dict[tuple[type, ...], str] | None = None,
) -> list[str]:  # seen: each union already listed, by where
    """A section's table, then each nested section's (a union's: one table per kind, once: a union met again,
    as every dataset's ``partition``, points to the first), a level down."""
    seen = {} if seen is None else seen
    doc = " ".join((model.__doc__ or "").split())
    lines = [f"{'#' * min(level, 6)} `{title or path}`", "", doc, "", *_table(model, skip), ""]
    for name, info in model.model_fields.items():
        inner = _model(info.annotation) or _model(_without_none(info.annotation))
        if inner is not None:
            first = seen.setdefault((inner,), f"{title or path}")
            if first != f"{title or path}" and path != "":  # one class in several sections: its table once
                lines += [f"`{path}.{name}` takes the fields listed under `{first}` above.", ""]
                continue
            lines += _section(f"{path}.{name}", inner, level + 1, seen=seen)
            continue
        members = _members(info.annotation) or _members(_without_none(info.annotation))
        if not members:
            continue
        here = f"{title or path}"  # the heading a union is first listed under
        first = seen.setdefault(tuple(members), here)
        if first != here:
            lines += [f"`{path}.{name}` takes the kinds listed under `{first}` above.", ""]
            continue
        for member in members:
            lines += _section(f"{path}.{name}", member, level + 1, f"{path}.{name}.{_tag(member)}", seen=seen)
    return lines


def _without_none(annotation: Any) -> Any:
    """An optional union's union (``Schedule | None``'s ``Schedule``)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if len(args) == 1 else annotation


def model_reference(path: str, model: type[BaseModel], level: int = 2) -> str:
    """One config model's reference as Markdown (the split fine-tuning config's, a sweep's)."""
    return "\n".join(_section(path, model, level))


def _kinds(section: str) -> list[str]:
    """A stage section: the fields every kind has, then each registered kind's own."""
    registry = STAGES[section]
    lines = [f"## `{section}`", "", f"`{section}.kind`: one of {', '.join(f'`{k}`' for k in registry.kinds())}.", ""]
    base = set(registry.base.model_fields)
    for kind in registry.kinds():
        entry = registry.entry(kind)
        assert entry is not None
        own = [n for n in entry.config.model_fields if n not in base or n == "kind"]
        if own == ["kind"] and kind != "none":  # a kind of the section's own settings (privacy's): those
            own += [n for n in base if n not in StageConfig.model_fields]
        doc = " ".join((entry.config.__doc__ or "").split())
        lines += [f"### `{section}.kind: {kind}`", "", doc, ""]
        lines += [*_table(entry.config, set(entry.config.model_fields) - set(own) | {"kind"}), ""]
    return lines


def _algorithms() -> list[str]:
    lines = ["## `algorithm`", "", f"`algorithm.kind`: one of {', '.join(f'`{n}`' for n in algorithm_names())}.", ""]
    seen: set[type] = set()
    unions: dict[tuple[type, ...], str] = {}  # the schedules every algorithm takes, listed under the first
    for name in algorithm_names():
        entry = algorithm_entry(name)
        assert entry is not None
        if entry.config in seen:  # the settings of a kind above
            first = next(n for n in algorithm_names() if getattr(algorithm_entry(n), "config", None) is entry.config)
            lines += [f"### `algorithm.kind: {name}`", "", f"Takes the settings of `algorithm.kind: {first}`.", ""]
            continue
        seen.add(entry.config)
        lines += _section("algorithm", entry.config, 3, f"algorithm.kind: {name}", frozenset({"kind"}), unions)
    return lines


def reference_markdown() -> str:
    """The whole reference as Markdown: the top-level fields, each plain section, then the stage sections."""
    stage_sections = {*STAGES, "algorithm"}
    top = [
        n
        for n, f in RunConfig.model_fields.items()
        if _model(f.annotation) is None and not _members(f.annotation) and n not in stage_sections
    ]
    lines = ["## Top-level fields", "", *_table(RunConfig, set(RunConfig.model_fields) - set(top)), ""]
    seen: dict[tuple[type, ...], str] = {}
    for name, info in RunConfig.model_fields.items():
        inner = _model(info.annotation)
        if inner is not None and name not in stage_sections:
            lines += _section(name, inner, 2, seen=seen)
        elif members := _members(info.annotation):  # one kind of the section per member
            lines += [f"## `{name}`", ""]
            for member in members:
                lines += _section(name, member, 3, title=f"{name}.{_tag(member)}", seen=seen)
    lines += _algorithms()
    for section in STAGES:
        lines += _kinds(section)
    return "\n".join(lines)
