"""The `gagar` command line: `main` (the commands), `options` (options generated from config
dataclasses), `examples` (the example closing each command's help).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.util.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "main": "grader.cli.commands",
    "build_parser": "grader.cli.commands",
}

if TYPE_CHECKING:
    from grader.cli.commands import build_parser, main

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = ["build_parser", "main"]
