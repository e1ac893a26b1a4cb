"""Every error gagar raises on purpose, under one base class, `GagarError`.

Catch `GagarError` to handle anything gagar reports about its input or its environment; anything else is a
bug. The classes that stand for bad values also derive from `ValueError`, so callers that treat bad input
as a `ValueError` keep working. The pipeline turns each of these into a group's result (never an exception
out of a batch): see `grader.groups.outcomes` for the typed reasons a result carries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class GagarError(Exception):
    """The base of every error gagar raises on purpose."""


class GitError(GagarError, RuntimeError):
    """A git command failed; the message carries the command and git's own words."""

    def __init__(self, args: Sequence[str], returncode: int, stderr: str) -> None:
        self.returncode = returncode
        self.stderr = stderr.strip()
        super().__init__(f"git {' '.join(args)} exited {returncode}: {self.stderr}")


class PatchError(GagarError, ValueError):
    """A patch that cannot be accepted (malformed, unsafe path, binary, over the size cap); says why."""


class WorkspaceError(GagarError, RuntimeError):
    """A group's workspace cannot be built (repository or base commit unusable); names the group."""


class BaseCommitMissing(WorkspaceError):
    """A group's base commit is not in its repository; names the group and the commit."""


class InvalidRanking(GagarError, ValueError):
    """A ranking that does not rank exactly the expected candidates once each; the message says how."""


class InvalidReference(GagarError, ValueError):
    """A reference that cannot be scored against: malformed, or its preferences contradict each other or
    form a cycle. The message names the file, the group and the pair."""


class GradingFailed(GagarError, RuntimeError):
    """A grader could not produce a ranking; the group passes through unchanged with this reason.

    What is known anyway goes to the result: model `usage`, the `transcript` path, `flags` (lines that
    address the grader) and free-form `details`.
    """

    def __init__(
        self,
        reason: str,
        details: dict[str, Any] | None = None,
        *,
        usage: dict[str, int] | None = None,
        transcript: str | None = None,
        flags: dict[str, list[str]] | None = None,
    ) -> None:
        super().__init__(reason)
        self.details = details or {}
        self.usage = usage or {}
        self.transcript = transcript
        self.flags = flags or {}


class InputFileError(GagarError, ValueError):
    """An input file that does not exist or cannot be read; the message names it."""


class UnknownName(GagarError, ValueError):
    """A registry has nothing under the name asked for; the message lists what it has."""


class SandboxError(GagarError, RuntimeError):
    """A sandbox could not do what was asked (unknown target, bad argument, backend failure, closed)."""


class SandboxUnavailable(SandboxError):
    """The requested sandbox backend or isolation is not available here; nothing was run."""


class ImageBuildError(GagarError, RuntimeError):
    """An image could not be built (no engine, debootstrap failed, a Dockerfile step failed)."""


class EnvironmentBuildError(ImageBuildError):
    """A task's environment layer could not be built (a requirement PyPI lacks, a timeout, a full disk).

    It concerns that task only: its `run` says so, the rest of the batch goes on. The error has two parts:
    `str(error)` is for people (the layer's tag, the host's log path, how to retry), `reason` is for a model
    grading the task (what is unavailable and why, in the task's terms, with no host detail).
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        """Args:
        message: the full message, with the host details a user needs.
        reason: one or two lines in the task's terms; None takes `message` (when it has no host detail).
        """
        super().__init__(message)
        self.reason = reason or message

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        # Both parts survive a trip to another process (the default would keep the message only).
        return type(self), (str(self), self.reason)


class UnknownInterpreter(GagarError, ValueError):
    """A task asks for a Python that does not exist or that no available interpreter can stand in for."""


class DegradeError(GagarError, ValueError):
    """A group cannot be degraded (no such clean trajectory, it does not apply) or a variant failed to."""


class NotApplicable(GagarError, ValueError):
    """An edit cannot be made on this source (nothing to edit, or no safe way to edit it); says why."""


class DistillError(GagarError, ValueError):
    """A distillation run that cannot start: an output folder that cannot be written, another run writing
    there, a resume whose settings differ from the run it continues. Raised before any teacher call."""


class ToolError(GagarError):
    """A tool call the model got wrong; the message goes back to the model, never out of the grader."""


__all__ = [
    "DegradeError",
    "EnvironmentBuildError",
    "GagarError",
    "BaseCommitMissing",
    "GitError",
    "GradingFailed",
    "ImageBuildError",
    "InputFileError",
    "InvalidRanking",
    "InvalidReference",
    "NotApplicable",
    "PatchError",
    "SandboxError",
    "SandboxUnavailable",
    "ToolError",
    "UnknownInterpreter",
    "UnknownName",
    "WorkspaceError",
]
