"""gagar: Groupwise Agentic Grading and Advantage Redistribution.

The public API. Load groups, grade them, redistribute advantages:

    from grader import get_grader, grade_groups, load_groups
    for result in grade_groups(load_groups(["examples/inventory_group.json"]), get_grader("heuristic")):
        print(result.ranking, result.advantages_after)

In asyncio code, `await grade_group(group, grader)` grades one group without blocking the loop.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from grader.lazy import lazy_exports

# Each public name and the module that defines it. They load on first use (PEP 562, `grader.lazy`), so
# `import grader` in a trainer process costs two small modules, and only what a caller touches is imported:
# the evaluation package, the sandbox images and recipes and distillation stay unloaded unless asked for.
_EXPORTS: dict[str, str] = {
    "CachedGrader": "grader.cache",
    "GradeCache": "grader.cache",
    "Concurrency": "grader.concurrency",
    "GagarError": "grader.errors",
    "LoadFailure": "grader.formats",
    "load_group_file": "grader.formats",
    "load_groups": "grader.formats",
    "parse_group": "grader.formats",
    "import_swebench": "grader.sandbox.swebench",
    "Grade": "grader.graders.base",
    "Grader": "grader.graders.base",
    "GradingFailed": "grader.graders.base",
    "get_grader": "grader.graders.base",
    "register_grader": "grader.graders.base",
    "redistribute_advantages": "grader.integrations.tensors",
    "Group": "grader.models",
    "GroupGrade": "grader.models",
    "GroupResult": "grader.models",
    "Task": "grader.models",
    "Trajectory": "grader.models",
    "Outcome": "grader.outcomes",
    "GradingOptions": "grader.pipeline",
    "grade_group": "grader.pipeline",
    "grade_group_sync": "grader.pipeline",
    "grade_groups": "grader.pipeline",
    "write_results": "grader.pipeline",
    "InvalidRanking": "grader.ranking",
    "validate_ranking": "grader.ranking",
    "is_mixed_group": "grader.redistribute",
    "mixed_group_mask": "grader.redistribute",
    "rank_to_weights": "grader.redistribute",
    "redistribute_batch": "grader.redistribute",
    "redistribute_group": "grader.redistribute",
    "GradingView": "grader.view",
    "Workspace": "grader.workspace",
    "WorkspaceError": "grader.workspace",
    "open_workspace": "grader.workspace",
}

if TYPE_CHECKING:
    from grader.cache import CachedGrader, GradeCache
    from grader.concurrency import Concurrency
    from grader.errors import GagarError
    from grader.formats import LoadFailure, load_group_file, load_groups, parse_group
    from grader.graders.base import Grade, Grader, GradingFailed, get_grader, register_grader
    from grader.integrations.tensors import redistribute_advantages
    from grader.models import Group, GroupGrade, GroupResult, Task, Trajectory
    from grader.outcomes import Outcome
    from grader.pipeline import GradingOptions, grade_group, grade_group_sync, grade_groups, write_results
    from grader.ranking import InvalidRanking, validate_ranking
    from grader.redistribute import (
        is_mixed_group,
        mixed_group_mask,
        rank_to_weights,
        redistribute_batch,
        redistribute_group,
    )
    from grader.sandbox.swebench import import_swebench
    from grader.view import GradingView
    from grader.workspace import Workspace, WorkspaceError, open_workspace


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("gagar")
        except PackageNotFoundError:  # a source tree on sys.path, not installed
            return "0+unknown"
    if name == "LoadError":
        import warnings

        warnings.warn(
            "grader.LoadError is renamed LoadFailure (it is returned, not raised)",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module("grader.formats").LoadFailure
    return _exported(name)


_exported, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


__all__ = [
    "CachedGrader",
    "Concurrency",
    "GagarError",
    "Grade",
    "GradeCache",
    "Grader",
    "GradingFailed",
    "GradingOptions",
    "GradingView",
    "Group",
    "GroupGrade",
    "GroupResult",
    "InvalidRanking",
    "LoadFailure",
    "Outcome",
    "Task",
    "Trajectory",
    "Workspace",
    "WorkspaceError",
    "get_grader",
    "grade_group",
    "grade_group_sync",
    "grade_groups",
    "import_swebench",
    "is_mixed_group",
    "load_group_file",
    "load_groups",
    "mixed_group_mask",
    "open_workspace",
    "parse_group",
    "rank_to_weights",
    "redistribute_advantages",
    "redistribute_batch",
    "redistribute_group",
    "register_grader",
    "validate_ranking",
    "write_results",
]
