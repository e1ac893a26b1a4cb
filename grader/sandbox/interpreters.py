"""Which Python a task gets: the interpreters Debian's mirror still ships, and the nearest one to a request.

There is no registry here, so interpreters come from Debian releases (debootstrapped by `images`): bullseye
has 3.9, bookworm 3.11, trixie 3.13. A task that names another 3.x gets the nearest of these, and the choice
says so. A tie goes to the newer one (3.10 code may use syntax 3.9 lacks: `match`, `X | Y` annotations),
unless the task's requirements are pinned: pins chosen for 3.10 mostly have wheels for 3.9 (packages drop an
old Python years after its release) and often none for 3.11 (SWE-bench's xarray 0.12 pins numpy 1.23.0,
whose first wheel for 3.11 is 1.23.2), and an older interpreter is closer to the code of their time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from grader.errors import UnknownInterpreter


@dataclass(frozen=True)
class Interpreter:
    """One interpreter the mirror provides."""

    version: str
    """Major.minor, e.g. "3.9"."""
    suite: str
    """The Debian release that ships it as `python3`."""


INTERPRETERS = (
    Interpreter("3.9", "bullseye"),
    Interpreter("3.11", "bookworm"),
    Interpreter("3.13", "trixie"),
)
DEFAULT_PYTHON = "3.11"
# Python 3 minor releases that exist (3.0 to 3.14); a request beyond them is a typo, not a future version.
_KNOWN_MINORS = range(0, 15)


@dataclass(frozen=True)
class InterpreterChoice:
    """The interpreter picked for a request, and whether it is the one asked for."""

    requested: str
    interpreter: Interpreter

    @property
    def exact(self) -> bool:
        return self.requested == self.interpreter.version

    @property
    def note(self) -> str:
        """ "" when exact, else one sentence saying what stands in for what."""
        if self.exact:
            return ""
        return (
            f"Python {self.requested} is not available offline; using {self.interpreter.version} "
            f"(Debian {self.interpreter.suite}), the nearest"
        )


def choose_interpreter(requested: str | None, pinned: bool = False) -> InterpreterChoice:
    """The interpreter for a task's `python` (e.g. "3.9", "3.10.4", "python3.8"); None means the default.

    Args:
        requested: the task's `python`.
        pinned: the task's requirements pin exact versions: a tie goes to the older interpreter.

    Returns:
        The nearest available interpreter (on a tie the newer one, or the older one when `pinned`).

    Raises:
        UnknownInterpreter: `requested` is not a Python 3 release (e.g. "2.7", "3.42", "pypy").
    """
    text = (requested or DEFAULT_PYTHON).strip()
    match = re.fullmatch(r"(?:python|py|cpython)?\s*(\d+)\.(\d+)(?:\.\d+)?", text, flags=re.I)
    if not match:
        raise UnknownInterpreter(f"unknown interpreter {requested!r}: expected a version such as '3.9'")
    major, minor = int(match.group(1)), int(match.group(2))
    if major != 3 or minor not in _KNOWN_MINORS:
        available = ", ".join(i.version for i in INTERPRETERS)
        raise UnknownInterpreter(
            f"unknown interpreter Python {major}.{minor}: not a Python 3 release any of {available} can run"
        )
    # Nearest by minor; on a tie the newer (sorted by distance, then by descending minor), or the older.
    tie = 1 if pinned else -1
    best = min(INTERPRETERS, key=lambda i: (abs(_minor(i) - minor), tie * _minor(i)))
    return InterpreterChoice(f"3.{minor}", best)


def _minor(interpreter: Interpreter) -> int:
    return int(interpreter.version.split(".")[1])
