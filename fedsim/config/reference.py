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
    rows = ["| field | type | default | bounds | what it is |", "|---|---|---|---|---|"]
    for name, info in model.model_fields.items():
        if name in skip:
            continue
        description = (info.description or "").replace("|", "\\|").replace("\n", " ")
        rows.append(f"| `{name}` | {_type(info.annotation)} | {_default(info)} | {_bounds(info)} | {description} |")
    return rows


def _section(path: str, model: type[BaseModel], level: int, title: str | None = None) -> list[str]:
    doc = " ".join((model.__doc__ or "").split())
    lines = [f"{'#' * level} `{title or path}`", "", doc, "", *_table(model), ""]
    for name, info in model.model_fields.items():
        inner = _model(info.annotation)
        if inner is not None:
            lines += _section(f"{path}.{name}", inner, level + 1)
    return lines


def _kinds(section: str) -> list[str]:
    """A stage section: the fields every kind has, then each registered kind's own."""
    registry = STAGES[section]
    lines = [f"## `{section}`", "", f"`{section}.kind`: one of {', '.join(f'`{k}`' for k in registry.kinds())}.", ""]
    base = set(registry.base.model_fields)
    for kind in registry.kinds():
        entry = registry.entry(kind)
        assert entry is not None
        own = [n for n in entry.config.model_fields if n not in base or n == "kind"]
        doc = " ".join((entry.config.__doc__ or "").split())
        lines += [f"### `{section}.kind: {kind}`", "", doc, ""]
        lines += [*_table(entry.config, set(entry.config.model_fields) - set(own) | {"kind"}), ""]
    return lines


def _algorithms() -> list[str]:
    lines = ["## `algorithm`", "", f"`algorithm.kind`: one of {', '.join(f'`{n}`' for n in algorithm_names())}.", ""]
    seen: set[type] = set()
    for name in algorithm_names():
        entry = algorithm_entry(name)
        assert entry is not None
        if entry.config in seen:
            continue
        seen.add(entry.config)
        doc = " ".join((entry.config.__doc__ or "").split())
        lines += [f"### `algorithm.kind: {name}`", "", doc, "", *_table(entry.config, {"kind"}), ""]
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
    for name, info in RunConfig.model_fields.items():
        inner = _model(info.annotation)
        if inner is not None and name not in stage_sections:
            lines += _section(name, inner, 2)
        elif members := _members(info.annotation):  # one kind of the section per member
            lines += [f"## `{name}`", ""]
            for member in members:
                lines += _section(name, member, 3, title=f"{name}.{_tag(member)}")
    lines += _algorithms()
    for section in STAGES:
        lines += _kinds(section)
    return "\n".join(lines)
