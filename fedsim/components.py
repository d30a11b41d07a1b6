"""Components named by import path: :func:`fedsim.config.imports.resolve`, where the config's registries
resolve ``factory`` too."""

from __future__ import annotations

from fedsim.config.imports import resolve

__all__ = ["resolve"]
