"""The trees a run is read from besides a YAML file: a mapping given with overrides (the Python API's), and a run
directory's config.json with the Python objects it was made with (a resume's)."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedsim.config.algorithm import decentralised_kind
from fedsim.config.base import ConfigError, apply_overrides
from fedsim.config.respell import today_spelled
from fedsim.config.run import RunConfig, parse_config, saved_tree
from fedsim.config.variants import switch_variants

PROVIDED = "provided.json"  # a run of Python objects (model=, data=, task=): which, so that a resume asks for them


def overridden(tree: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of ``tree`` with ``key=value`` ``overrides`` applied as ``--set`` applies them (a variant switch
    drops the old variant's settings); ``tree`` itself is left as it was."""
    out = copy.deepcopy(dict(tree))
    if not overrides:
        return out
    apply_overrides(out, list(overrides))
    try:
        out = today_spelled(out, decentralised_kind)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    switch_variants(out, list(overrides), RunConfig)
    return out


def saved_config(out: Path) -> RunConfig:
    """The config of the run in ``out`` (its config.json), or one ConfigError saying why there is none."""
    saved = out / "config.json"
    if not saved.is_file():
        raise ConfigError(f"{out} is not a fedsim run directory (no config.json)")
    try:
        tree = json.loads(saved.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(
            f"{saved}: not the JSON config fedsim wrote ({exc.__class__.__name__}); nothing resumed"
        ) from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{saved}: not the JSON config fedsim wrote (not a mapping); nothing resumed")
    return parse_config(saved_tree(tree))


def provided_objects(out: Path) -> list[str]:
    """The Python objects (``model``, ``data``, ``task``) the run in ``out`` was made with: none for a run of a
    config alone."""
    marker = out / PROVIDED
    if not marker.is_file():
        return []
    try:
        names = json.loads(marker.read_text(encoding="utf-8")).get("provided", [])
    except (UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        raise ConfigError(f"{marker}: not the list of Python objects fedsim wrote; nothing resumed") from None
    return [str(name) for name in names]
