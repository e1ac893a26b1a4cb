"""The workspace: one bare git repository per group at the task's base commit, a branch per trajectory,
and the read-only view graders see (`view`). Git only: nothing here knows graders or LLMs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.util.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "Workspace": "grader.workspace.workspace",
    "WorkspaceError": "grader.errors",
    "open_workspace": "grader.workspace.workspace",
    "ref_name": "grader.workspace.workspace",
    "DEFAULT_MAX_FUZZ": "grader.workspace.workspace",
    "BASE_REF": "grader.workspace.workspace",
    "GradingView": "grader.workspace.view",
    "WorkspaceView": "grader.workspace.view",
    "BASE": "grader.workspace.view",
}

if TYPE_CHECKING:
    from grader.errors import WorkspaceError
    from grader.workspace.view import BASE, GradingView, WorkspaceView
    from grader.workspace.workspace import BASE_REF, DEFAULT_MAX_FUZZ, Workspace, open_workspace, ref_name

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "BASE",
    "BASE_REF",
    "DEFAULT_MAX_FUZZ",
    "GradingView",
    "Workspace",
    "WorkspaceError",
    "WorkspaceView",
    "open_workspace",
    "ref_name",
]
