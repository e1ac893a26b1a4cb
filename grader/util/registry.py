"""Registries by decorator: a name, the thing it names, its config dataclass and its docstring, together.

As verl registers advantage estimators, gagar registers graders (`grader.graders.GRADERS`) and sandbox
backends (`grader.sandbox.BACKENDS`). A config is a dataclass with a docstring under each field; the CLI of
every command that takes the thing generates its options from that config (`grader.cli.options`), so the
commands cannot drift apart.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass
from typing import Any, Generic, TypeVar

from grader.errors import UnknownName

T = TypeVar("T")


@dataclass(frozen=True)
class Entry(Generic[T]):
    """One registered name."""

    name: str
    config: type | None
    """The config dataclass whose fields are the options `create` takes (None: it takes none)."""
    doc: str
    """The first paragraph of the factory's docstring: what `--help` and the docs say of it."""
    _factory: Callable[..., T] | str

    @property
    def factory(self) -> Callable[..., T]:
        """The class or function that makes one; "module:attribute" strings are imported on first use."""
        if isinstance(self._factory, str):
            module, _, attribute = self._factory.partition(":")
            return getattr(importlib.import_module(module), attribute)
        return self._factory


class Registry(Generic[T]):
    """Names of one kind (`kind` is used in messages: "grader", "sandbox backend")."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}

    def register(
        self, name: str, config: type | None = None, doc: str | None = None
    ) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Decorator: register a class or function under `name`, with the config dataclass of its options.

        Raises ValueError when the name is taken (replacing one silently would change runs that name it)
        or the config is not a dataclass.
        """

        def decorator(factory: Callable[..., T]) -> Callable[..., T]:
            self.add(name, factory, config, doc)
            return factory

        return decorator

    def add(
        self, name: str, factory: Callable[..., T] | str, config: type | None = None, doc: str | None = None
    ) -> None:
        """Register without a decorator; `factory` may be "module:attribute", imported only when used.

        Raises:
            ValueError: `name` is already registered, or `config` is given and is not a dataclass.
        """
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        if config is not None and not is_dataclass(config):
            raise ValueError(f"the config of {self.kind} {name!r} must be a dataclass")
        text = doc or (getattr(factory, "__doc__", None) if not isinstance(factory, str) else None) or ""
        if not text and config is not None:
            text = config.__doc__ or ""
        self._entries[name] = Entry(name, config, text.strip().split("\n\n")[0], factory)

    def get(self, name: str) -> Entry[T]:
        """The entry of `name`. Raises UnknownName listing the registered names."""
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownName(f"unknown {self.kind} {name!r}; available: {', '.join(self.names())}") from None

    def names(self) -> list[str]:
        return list(self._entries)

    def entries(self) -> list[Entry[T]]:
        return list(self._entries.values())

    def create(self, name: str, **options: Any) -> T:
        """Make the thing named `name` with `options` (fields of its config).

        Raises UnknownName for an unknown name, ValueError for an option its config does not have or a
        required one (a field without a default) not given.
        """
        entry = self.get(name)
        config_fields = fields(entry.config) if entry.config is not None else ()
        allowed = {f.name for f in config_fields}
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ValueError(
                f"{self.kind} {name!r} has no option {', '.join(map(repr, unknown))}; "
                f"options: {', '.join(sorted(allowed)) or 'none'}"
            )
        missing = [f.name for f in config_fields if f.name not in options and is_required(f)]
        if missing:
            flags = ", ".join("--" + option.replace("_", "-") for option in missing)
            raise ValueError(f"{self.kind} {name!r} needs {', '.join(missing)} ({flags})")
        return entry.factory(**options)


def is_required(f: Field[Any]) -> bool:
    """A config field without a default: `create` refuses to go on without it."""
    return f.default is MISSING and f.default_factory is MISSING
