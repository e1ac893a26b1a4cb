"""Package exports resolved on first use (PEP 562), so importing a package loads none of its modules.

A package's `__init__` names each public name's module; `import grader.evaluation.metrics` then no longer
pays for the AST degrader, nor `import grader` for the pipeline, until a caller touches what needs them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import warnings
from collections.abc import Callable, Mapping
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of a package whose public names load on first access.

    Args:
        package: the package's `__name__` (for the error message).
        exports: each public name and the module that defines it (absolute, e.g. "grader.pipeline").
        namespace: the package's `globals()`: a name, once loaded, is stored there, so the next access is
            an ordinary attribute lookup.

    Returns:
        (`__getattr__`, `__dir__`). `__getattr__` raises AttributeError for a name not exported, and lets the
        ImportError of a module that cannot be imported propagate.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__


class _MovedModules:
    """Old module paths as aliases of their new homes: `import grader.atomic` warns and gives
    `grader.util.atomic` itself (one module object under two names, so a monkeypatch through either
    reaches the same code).

    A meta path finder and its loader by protocol (`find_spec`, `create_module`, `exec_module`), not by
    `importlib.abc`'s bases: importing that module cost `import grader` a millisecond, a third of its time.
    """

    def __init__(self, moved: Mapping[str, str], removal: str) -> None:
        self.moved = dict(moved)
        self.removal = removal

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        if fullname not in self.moved:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        new = self.moved[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; the old path goes in gagar {self.removal}",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        pass  # already executed under its new name


def alias_moved_modules(moved: Mapping[str, str], *, removal: str) -> None:
    """Keep old module paths importable, each with a DeprecationWarning naming its new home.

    Args:
        moved: each old dotted module path and the new one it now lives at.
        removal: the release in which the old paths go, for the warning.

    Installs one finder on `sys.meta_path` (once per process, whatever the number of calls with the same
    table); it answers only for the names in `moved`, so every other import is untouched.
    """
    if not any(isinstance(f, _MovedModules) and f.moved == dict(moved) for f in sys.meta_path):
        sys.meta_path.append(_MovedModules(moved, removal))


def renamed_names(module: str, renamed: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module `__getattr__` that answers each old name with its new one, with a DeprecationWarning.

    Args:
        module: the module's `__name__`, for the messages.
        renamed: each old name and the new name it now has in the same module.
        namespace: the module's `globals()`.
    """

    def __getattr__(name: str) -> Any:
        new = renamed.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(f"{module}.{name} is renamed {new}", DeprecationWarning, stacklevel=2)
        return namespace[new]

    return __getattr__
