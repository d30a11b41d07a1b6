"""Switching a section's variant with an override: ``--set data.dataset=mnist`` on a file whose ``data:`` is
another dataset's drops the settings the new variant does not take, and says which in one note, so that a switch
needs no ``--unset``. A setting the overrides give themselves is never dropped (a wrong one stays an error)."""

from __future__ import annotations

import typing
import warnings
from typing import Any

from pydantic import BaseModel

from fedsim.config.base import union_members


class VariantNote(UserWarning):
    """Settings an override's variant switch dropped (the command line prints it as one ``note:`` line)."""


def _members(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models of a field annotation: a section's one, or a union's (:func:`union_members`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return union_members(annotation)


def _tag_values(model: type[BaseModel], field: str) -> tuple[Any, ...]:
    """The values a Literal field of ``model`` takes (none: not a Literal)."""
    info = model.model_fields.get(field)
    annotation = info.annotation if info is not None else None
    return typing.get_args(annotation) if typing.get_origin(annotation) is typing.Literal else ()


def _variant(members: list[type[BaseModel]], node: dict[str, Any]) -> type[BaseModel] | None:
    """The member whose Literal fields all agree with ``node`` (the first, when several do)."""
    for model in members:
        tags = {key: _tag_values(model, key) for key in node}
        if all(value in tags[key] for key, value in node.items() if tags[key]):
            return model
    return None


def switch_variants(tree: dict[str, Any], overrides: list[str] | tuple[str, ...], root: type[BaseModel]) -> None:
    """Drop, in place, the settings of each section whose variant an override switched (its ``kind``, ``dataset``
    or other Literal tag) that the new variant does not take; one :class:`VariantNote` per switch names them."""
    given = {assignment.partition("=")[0].strip() for assignment in overrides}
    for key in sorted(given):
        *path, tag = key.split(".")
        node: Any = tree
        model: type[BaseModel] | None = root
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
            field = model.model_fields.get(part) if model is not None else None
            if not isinstance(node, dict) or field is None:
                break
            model = _variant(_members(field.annotation), node)
        else:
            if model is None or not isinstance(node, dict) or not _tag_values(model, tag):
                continue
            section = ".".join(path)
            dropped = [k for k in node if k not in model.model_fields and f"{section}.{k}" not in given]
            for name in dropped:
                del node[name]
            if dropped:
                names = ", ".join(f"{section}.{name}" for name in dropped)
                warnings.warn(f"{key}={node[tag]} drops {names} (not settings of {node[tag]})", VariantNote, 2)
