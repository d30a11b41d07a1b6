"""Components named by import path (torchtune's ``_component_``): ``package.module:attribute``.

A model, dataset or task that the user writes is named in YAML by where it lives; this resolves the name and
says in one line what went wrong (the module does not import, the attribute is missing, it is not callable).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from fedsim.config import ConfigError


def resolve(path: str, field: str) -> Callable[..., Any]:
    """The callable at ``path`` (``package.module:name``, dots allowed after the colon); ``field`` names the
    config field in errors (``model.factory``). The directory fedsim runs in is searched too, after every
    installed package, so ``my_pkg/data.py`` beside your config imports without PYTHONPATH."""
    module_name, _, attribute = path.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:  # your module beside your config, as `python -m` finds
        sys.path.append(os.getcwd())  # last: it never shadows an installed package
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # a user's module may fail to import in any way: say which and why, in one line
        raise ConfigError(f"{field}: cannot import {module_name!r} ({type(exc).__name__}: {exc})") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConfigError(f"{field}: {module_name!r} has no attribute {attribute!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ConfigError(f"{field}: {path!r} is not callable")
    return target
