"""Package exports resolved on first use (PEP 562), so importing a package loads none of its modules.

A package's `__init__` names each public name's module; `import grader.evaluation.metrics` then no longer
pays for the AST degrader, nor `import grader` for the pipeline, until a caller touches what needs them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
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
