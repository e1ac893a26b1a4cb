"""What a grader may see of a group: `GradingView`, a read-only view of its workspace.

Graders receive a view, never the workspace: they can ask which candidates to rank, how their patches
applied, and read trees and diffs through git objects, but cannot reach the workspace's build state or change
anything. `Workspace` implements the protocol; the pipeline hands graders a `WorkspaceView` over it, which
exposes the protocol and nothing else. A view is also a sandbox's `TreeSource` (`targets`, `archive`).

This module sits a floor below the workspace (docs/architecture.md, *Floors*): it names what a view reads of
a workspace as a Protocol (`ViewedWorkspace`) and never the workspace module, which imports this one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from grader.groups.models import PatchStats, Task
from grader.util.concurrency import Concurrency
from grader.workspace.archives import TreeChanges

BASE = "base"
"""The target name of the task's base commit, next to the trajectory ids."""


@dataclass(frozen=True)
class CandidateInfo:
    """One trajectory as a grader may know it: how its patch fared, never how it was built."""

    trajectory_id: str
    passed: bool
    applied: bool
    """Its patch applied and verified: it has a tree that can be read, diffed and run."""
    apply_method: str | None
    """How it applied: "plain", "3way", "whitespace", "fuzz1", "fuzz2" or "empty"; None when it did not."""
    error: str | None
    """Why it has no tree (invalid patch, does not apply, failed verification), when it has none."""
    patch_class: int | None
    """Index of its class of equivalent patches (equal up to whitespace), for passing applied ones."""
    stats: PatchStats | None
    """What the patch touches, when it parsed."""


@runtime_checkable
class GradingView(Protocol):
    """A read-only view of one group's workspace: what graders receive.

    Targets are "base" and the ids of applied trajectories. Every reading method raises `KeyError` for a
    target the group does not have (or one without a tree); nothing raises for what a file contains.
    """

    @property
    def group_id(self) -> str:
        """The group's id, for messages and transcript names."""
        ...

    @property
    def task(self) -> Task:
        """The task (a copy: changing it changes nothing): repository, base commit, statement, environment."""
        ...

    @property
    def resources(self) -> Concurrency:
        """The bounds this grading shares with every other grading in the process (LLM calls, sandboxes).

        Hold `resources.llm` around each model request and `resources.sandbox` for each open sandbox.
        """
        ...

    @property
    def classes(self) -> Sequence[Sequence[str]]:
        """The gradable trajectories grouped into classes of equivalent patches, first-seen order."""
        ...

    def gradable(self) -> list[str]:
        """Passing trajectories whose patch applied and verified: exactly the ids a ranking must cover."""
        ...

    def candidates(self) -> list[CandidateInfo]:
        """Every trajectory of the group (passing and failing), in the group's order."""
        ...

    def candidate(self, trajectory_id: str) -> CandidateInfo:
        """One trajectory. Raises KeyError when the group has no such trajectory."""
        ...

    def patch(self, trajectory_id: str) -> str:
        """The patch as the trajectory submitted it (untrusted text). Raises KeyError for an unknown id."""
        ...

    def targets(self) -> list[str]:
        """ "base" and every gradable trajectory: what can be diffed, read and run."""
        ...

    def diff(self, target: str, against: str = BASE, paths: list[str] | None = None, context: int = 3) -> str:
        """The unified diff from `against` to `target` (both targets, or any applied trajectory), optionally
        limited to `paths`, with `context` lines of context."""
        ...

    def read_file(self, target: str, path: str) -> bytes:
        """A file's bytes at a target, from git objects. Raises FileNotFoundError when it is not a file."""
        ...

    def exists(self, target: str, path: str) -> bool:
        """Whether a path (file or folder) exists at a target."""
        ...

    def list_files(self, target: str, under: str = "") -> list[str]:
        """Every file path at a target, optionally under a folder. Raises KeyError for a missing folder."""
        ...

    def grep(self, target: str, pattern: str, path: str | None = None, max_count: int = 200) -> list[str]:
        """`path:line:text` for each line matching an extended regular expression (at most `max_count` per
        file). Raises ValueError when git rejects the pattern."""
        ...

    def archive(self, target: str) -> bytes:
        """The target's pristine tree as an uncompressed tar, for a sandbox."""
        ...

    def changes(self, target: str) -> TreeChanges | None:
        """How a candidate's tree differs from base's, for a sandbox holding base's (None: use `archive`)."""
        ...


class ViewedWorkspace(Protocol):
    """What `WorkspaceView` reads of a workspace (`grader.workspace.workspace.Workspace` is the one in use):
    the `GradingView` methods, with `candidate_infos()` for `candidates()` and the bounds as `resources`."""

    @property
    def group_id(self) -> str: ...

    @property
    def task(self) -> Task: ...

    @property
    def resources(self) -> Concurrency: ...

    @property
    def classes(self) -> Sequence[Sequence[str]]: ...

    def gradable(self) -> list[str]: ...

    def candidate_infos(self) -> list[CandidateInfo]: ...

    def candidate(self, trajectory_id: str) -> CandidateInfo: ...

    def patch(self, trajectory_id: str) -> str: ...

    def targets(self) -> list[str]: ...

    def diff(
        self, target: str, against: str = BASE, paths: list[str] | None = None, context: int = 3
    ) -> str: ...

    def read_file(self, target: str, path: str) -> bytes: ...

    def exists(self, target: str, path: str) -> bool: ...

    def list_files(self, target: str, under: str = "") -> list[str]: ...

    def grep(self, target: str, pattern: str, path: str | None = None, max_count: int = 200) -> list[str]: ...

    def archive(self, target: str) -> bytes: ...

    def changes(self, target: str) -> TreeChanges | None: ...


class WorkspaceView:
    """The `GradingView` of a workspace: its reading methods and nothing else (see module docstring)."""

    __slots__ = ("_workspace", "_resources")

    def __init__(self, workspace: ViewedWorkspace, resources: Concurrency | None = None) -> None:
        self._workspace = workspace
        self._resources = resources or workspace.resources

    @property
    def group_id(self) -> str:
        return self._workspace.group_id

    @property
    def task(self) -> Task:
        return self._workspace.task

    @property
    def resources(self) -> Concurrency:
        return self._resources

    @property
    def classes(self) -> Sequence[Sequence[str]]:
        return self._workspace.classes

    def gradable(self) -> list[str]:
        return self._workspace.gradable()

    def candidates(self) -> list[CandidateInfo]:
        return self._workspace.candidate_infos()

    def candidate(self, trajectory_id: str) -> CandidateInfo:
        return self._workspace.candidate(trajectory_id)

    def patch(self, trajectory_id: str) -> str:
        return self._workspace.patch(trajectory_id)

    def targets(self) -> list[str]:
        return self._workspace.targets()

    def diff(self, target: str, against: str = BASE, paths: list[str] | None = None, context: int = 3) -> str:
        return self._workspace.diff(target, against, paths, context)

    def read_file(self, target: str, path: str) -> bytes:
        return self._workspace.read_file(target, path)

    def exists(self, target: str, path: str) -> bool:
        return self._workspace.exists(target, path)

    def list_files(self, target: str, under: str = "") -> list[str]:
        return self._workspace.list_files(target, under)

    def grep(self, target: str, pattern: str, path: str | None = None, max_count: int = 200) -> list[str]:
        return self._workspace.grep(target, pattern, path, max_count)

    def archive(self, target: str) -> bytes:
        return self._workspace.archive(target)

    def changes(self, target: str) -> TreeChanges | None:
        return self._workspace.changes(target)
