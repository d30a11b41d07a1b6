"""Registries of the round's stages: attacks and aggregation rules register as algorithms do.

Each kind of a stage is a settings class, a subclass of the section's base config with ``kind: Literal["..."]``
and its own fields, registered with the builder that makes the stage from it. A section of a run (``attack:``,
``aggregator:``) is validated by the class its ``kind`` names, so each section is a discriminated union that
anyone can extend: a setting of another kind is an error that lists the kind's own settings. Your own stage
registers with the section's decorator in your own module; YAML names it by ``factory: "package.module:Name"``
(the module is imported, which registers it, and ``Name`` is the registered builder), a Python script by
importing the module and giving ``kind``. The built-in kinds register when their package is first imported.
"""

from __future__ import annotations

import importlib
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import Field, ValidationError, create_model

from fedsim.config.base import Strict, SubConfigError
from fedsim.config.imports import registered_as

B = TypeVar("B", bound=Callable[..., Any])


class StageConfig(Strict):
    """The settings every stage kind has: its ``kind`` and, for your own, where it is registered."""

    kind: str = Field(description="the registered kind that runs (none: the stage is off)")
    factory: str | None = Field(
        None, description="your own stage: package.module:Name, a builder its module registers when imported"
    )

    def settings(self) -> dict[str, object]:
        """The kind's settings as summary.json and the plan print them: ``factory`` only for your own."""
        return self.model_dump(exclude={"factory"} if self.factory is None else set())


C = TypeVar("C", bound=StageConfig)


@dataclass(frozen=True)
class StageEntry(Generic[C]):
    kind: str
    config: type[C]
    build: Callable[..., Any]


def kinds_of(config: type[StageConfig]) -> tuple[str, ...]:
    field = config.model_fields["kind"]
    names = typing.get_args(field.annotation) if typing.get_origin(field.annotation) is Literal else ()
    if len(names) != 1 or not isinstance(names[0], str):
        raise TypeError(f"{config.__name__}.kind must be a Literal of the one kind it configures")
    return names


class Registry(Generic[C]):
    """The registered kinds of one section: ``section`` names it in errors, ``builtin`` is the package whose
    import registers the built-in kinds, ``base`` the settings class every kind subclasses."""

    def __init__(self, section: str, base: type[C], builtin: str, default: str, decorator: str) -> None:
        self.section, self.base, self.builtin, self.default = section, base, builtin, default
        self.decorator = decorator  # what your own stage registers with, as errors name it
        self._entries: dict[str, StageEntry[C]] = {}
        self._loaded = False

    def register(self, config: type[C]) -> Callable[[B], B]:
        """Decorate the builder of ``config``'s kind (a class or function called with the settings and the
        section's context) to register it."""
        if not issubclass(config, self.base):
            raise TypeError(f"{config.__name__} must subclass {self.base.__name__} to configure an {self.section}")
        (kind,) = kinds_of(config)

        def add(build: B) -> B:
            if kind in self._entries and not _same_definition(self._entries[kind].build, build):
                raise ValueError(f"{self.section}.kind {kind!r} is already registered")
            self._entries[kind] = StageEntry(kind, config, build)
            return build

        return add

    def unregister(self, kind: str) -> None:
        """Forget ``kind`` (tests that register a stage of their own clean up with this)."""
        self._entries.pop(kind, None)

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            importlib.import_module(self.builtin)

    def kinds(self) -> list[str]:
        """The registered kinds, the default first, then in the order they registered."""
        self._load()
        return sorted(self._entries, key=lambda kind: kind != self.default)

    def kinds_declaring(self, test: Callable[[type[C]], bool]) -> list[str]:
        """The registered kinds whose settings class passes ``test``: what a refusal names as the alternatives,
        read off the declarations."""
        return [kind for kind in self.kinds() if test(self._entries[kind].config)]

    def entry(self, kind: str) -> StageEntry[C] | None:
        if kind not in self._entries:
            self._load()
        return self._entries.get(kind)

    def build(self, cfg: C, *context: Any) -> Any:
        """The stage ``cfg`` configures, from its registered builder."""
        entry = self.entry(cfg.kind)
        if entry is None:  # a config validated before its kind was unregistered
            raise ValueError(f"{self.section}.kind {cfg.kind!r} is not registered")
        return entry.build(cfg, *context)

    def parse(self, value: Any, section: str | None = None) -> C:
        """The registered settings class named by ``value["kind"]`` (or by ``value["factory"]``), validated; a
        ValueError says what is wrong in one line, naming ``section`` (default the registry's)."""
        section = section or self.section
        if isinstance(value, self.base):
            return value
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ValueError(f"expected a mapping with a 'kind' (one of {', '.join(self.kinds())})")
        kind = value.get("kind", self.default)
        if value.get("factory") is not None:
            kind = self._registered_by(value["factory"], value.get("kind"), section)
            value = {**value, "kind": kind}
        entry = self.entry(kind) if isinstance(kind, str) else None
        if entry is None:  # pydantic's own words for a Literal, at section.kind
            allowed: Any = Literal[tuple(self.kinds())]
            known = create_model(f"{section}_kinds", __base__=Strict, kind=(allowed, ...))
            try:
                known.model_validate({"kind": kind})
            except ValidationError as exc:
                raise SubConfigError(exc, known) from None
        assert entry is not None
        try:
            return entry.config.model_validate(value)
        except ValidationError as exc:
            raise SubConfigError(exc, entry.config) from None

    def _registered_by(self, path: Any, kind: Any, section: str) -> str:
        """The kind that the builder at ``path`` (``package.module:Name``) is registered as."""
        self._load()

        def entries() -> list[tuple[str, tuple[object, ...]]]:
            return [(e.kind, (e.build,)) for e in self._entries.values()]

        remedy = f"a registered {section} (decorate it with {self.decorator} and its settings class)"
        return registered_as(str(path), f"{section}.factory", entries, kind, f"{section}.kind", remedy)


def _same_definition(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are one definition (the same file imported twice: as a script and as a module)."""
    if a is b:
        return True
    try:
        return bool(a.__qualname__ == b.__qualname__ and inspect.getfile(a) == inspect.getfile(b))
    except (AttributeError, TypeError):
        return False
