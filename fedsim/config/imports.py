"""Components named by import path (torchtune's ``_component_``): ``package.module:attribute`` or
``path/to/file.py:attribute``.

A model, dataset, task or stage that the user writes is named in YAML by where it lives; this resolves the
name and says in one line what went wrong (the module does not import, the attribute is missing, it is not
callable). The stage registries (:mod:`fedsim.config.registry`) resolve ``factory`` with it too.
"""

from __future__ import annotations

import importlib
import os
import reprlib
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fedsim.config.base import ConfigError


def resolve(path: str, field: str) -> Callable[..., Any]:
    """The callable at ``path`` (``package.module:name``, dots allowed after the colon, or
    ``path/to/file.py:name``); ``field`` names the config field in errors (``model.factory``). The directory
    fedsim runs in is searched too, after every installed package, so ``my_pkg/data.py`` beside your config
    imports without PYTHONPATH; a file is imported by its name, its directory searched after the installed
    packages (so a process the pool spawns finds it too)."""
    module_name, _, attribute = path.rpartition(":")
    if not module_name or not attribute:
        raise ConfigError(f"{field}: expected package.module:name or path/to/file.py:name, got {path[:80]!r}")
    file = None
    if module_name.endswith(".py"):
        file = Path(module_name).resolve()
        if not file.is_file():
            raise ConfigError(f"{field}: no file {module_name!r}")
        folder, module_name = str(file.parent), file.stem
    else:
        folder = os.getcwd()
    if folder not in sys.path and (file is not None or "" not in sys.path):  # as `python -m` finds it
        sys.path.append(folder)  # last: it never shadows an installed package
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # a user's module may fail to import in any way: say which and why, in one line
        raise ConfigError(f"{field}: cannot import {module_name!r} ({type(exc).__name__}: {exc})") from None
    except SystemExit as exc:  # a script's sys.exit() at import: fedsim would end, maybe with 0, having run nothing
        code = reprlib.repr(exc.code)  # a message of any length: shortened
        raise ConfigError(
            f"{field}: {module_name!r} exited on import (sys.exit({code})); keep a script's top level under"
            " `if __name__ == '__main__':`"
        ) from None
    if file is not None and Path(str(getattr(target, "__file__", ""))).resolve() != file:
        raise ConfigError(f"{field}: {file.name} is shadowed by the installed module {module_name!r}; rename it")
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"{field}: {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f"{field}: {path!r} is not callable")
    return target


def registered_as(
    path: str,
    field: str,
    entries: Callable[[], Iterable[tuple[str, tuple[object, ...]]]],
    given: Any,
    given_field: str,
    what: str,
) -> str:
    """The name that the callable at ``path`` is registered under (importing its module registers it):
    ``entries()``, read after the import, gives each name with the objects that stand for it (its builder, its
    settings class); ``given``,
    the name the config also wrote at ``given_field``, must agree. ``what`` ends the error of an unregistered
    one (``a registered attack (decorate it ...)``)."""
    target = resolve(path, field)
    found = [name for name, marks in entries() if any(target is mark for mark in marks)]
    if not found:
        raise ValueError(f"{field}: {path} is not {what}")
    if given is not None and given != found[0]:
        raise ValueError(f"{given_field}={given} but {path} is registered as {found[0]!r}")
    return found[0]
