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

from grader.util.lazy import alias_moved_modules, lazy_exports

# 0.3 regrouped the flat modules into packages (docs/architecture.md). The old paths stay importable, each
# an alias of its new home with a DeprecationWarning, for one release.
alias_moved_modules(
    {
        "grader.atomic": "grader.util.atomic",
        "grader.bare": "grader.workspace.bare",
        "grader.cache": "grader.graders.cache",
        "grader.cachedirs": "grader.util.cachedirs",
        "grader.cli_examples": "grader.cli.examples",
        "grader.cli_options": "grader.cli.options",
        "grader.concurrency": "grader.util.concurrency",
        "grader.exactapply": "grader.workspace.exactapply",
        "grader.filelock": "grader.util.filelock",
        "grader.formats": "grader.groups.formats",
        "grader.gitcmd": "grader.workspace.gitcmd",
        "grader.gitobjects": "grader.workspace.gitobjects",
        "grader.graders.budgets": "grader.graders.llm.budgets",
        "grader.graders.endpoint": "grader.graders.llm.endpoint",
        "grader.graders.llm_config": "grader.graders.llm.config",
        "grader.graders.tools": "grader.graders.llm.tools",
        "grader.hunks": "grader.workspace.hunks",
        "grader.injections": "grader.workspace.injections",
        "grader.integrations.verl_plugin": "grader.integrations.verl.plugin",
        "grader.jsontext": "grader.util.jsontext",
        "grader.lazy": "grader.util.lazy",
        "grader.length": "grader.ranking.length",
        "grader.llamacpp": "grader.servers.llamacpp",
        "grader.llamacpp_python": "grader.servers.llamacpp_python",
        "grader.mirrors": "grader.workspace.mirrors",
        "grader.models": "grader.groups.models",
        "grader.outcomes": "grader.groups.outcomes",
        "grader.patches": "grader.workspace.patches",
        "grader.prompts": "grader.graders.llm.prompts",
        "grader.ranking_agreement": "grader.ranking.agreement",
        "grader.redistribute": "grader.redistribution.redistribute",
        "grader.references": "grader.ranking.references",
        "grader.registry": "grader.util.registry",
        "grader.safenames": "grader.util.safenames",
        "grader.sampling": "grader.groups.sampling",
        "grader.serve": "grader.servers.serve",
        "grader.simulate": "grader.redistribution.simulate",
        "grader.simulate_cli": "grader.redistribution.simulate_cli",
        "grader.terminal": "grader.util.terminal",
        "grader.testing": "grader.servers.scripted",
        "grader.transcript": "grader.graders.transcript",
        "grader.view": "grader.workspace.view",
    },
    removal="0.4",
)

# Each public name and the module that defines it. They load on first use (PEP 562, `grader.util.lazy`), so
# `import grader` in a trainer process costs two small modules, and only what a caller touches is imported:
# the evaluation package, the sandbox images and recipes and distillation stay unloaded unless asked for.
_EXPORTS: dict[str, str] = {
    "CachedGrader": "grader.graders.cache",
    "GradeCache": "grader.graders.cache",
    "Concurrency": "grader.util.concurrency",
    "GagarError": "grader.errors",
    "LoadFailure": "grader.groups.formats",
    "load_group_file": "grader.groups.formats",
    "load_groups": "grader.groups.formats",
    "parse_group": "grader.groups.formats",
    "import_swebench": "grader.sandbox.swebench",
    "Grade": "grader.graders.base",
    "Grader": "grader.graders.base",
    "GradingFailed": "grader.graders.base",
    "get_grader": "grader.graders.base",
    "register_grader": "grader.graders.base",
    "redistribute_advantages": "grader.integrations.tensors",
    "Group": "grader.groups.models",
    "GroupGrade": "grader.groups.models",
    "GroupResult": "grader.groups.models",
    "Task": "grader.groups.models",
    "Trajectory": "grader.groups.models",
    "Outcome": "grader.groups.outcomes",
    "GradingOptions": "grader.pipeline",
    "grade_group": "grader.pipeline",
    "grade_group_sync": "grader.pipeline",
    "grade_groups": "grader.pipeline",
    "write_results": "grader.pipeline",
    "InvalidRanking": "grader.ranking.order",
    "validate_ranking": "grader.ranking.order",
    "is_mixed_group": "grader.redistribution.redistribute",
    "mixed_group_mask": "grader.redistribution.redistribute",
    "rank_to_weights": "grader.redistribution.redistribute",
    "redistribute_batch": "grader.redistribution.redistribute",
    "redistribute_group": "grader.redistribution.redistribute",
    "GradingView": "grader.workspace.view",
    "Workspace": "grader.workspace.workspace",
    "WorkspaceError": "grader.workspace.workspace",
    "open_workspace": "grader.workspace.workspace",
}

if TYPE_CHECKING:
    from grader.errors import GagarError
    from grader.graders.base import Grade, Grader, GradingFailed, get_grader, register_grader
    from grader.graders.cache import CachedGrader, GradeCache
    from grader.groups.formats import LoadFailure, load_group_file, load_groups, parse_group
    from grader.groups.models import Group, GroupGrade, GroupResult, Task, Trajectory
    from grader.groups.outcomes import Outcome
    from grader.integrations.tensors import redistribute_advantages
    from grader.pipeline import GradingOptions, grade_group, grade_group_sync, grade_groups, write_results
    from grader.ranking.order import InvalidRanking, validate_ranking
    from grader.redistribution.redistribute import (
        is_mixed_group,
        mixed_group_mask,
        rank_to_weights,
        redistribute_batch,
        redistribute_group,
    )
    from grader.sandbox.swebench import import_swebench
    from grader.util.concurrency import Concurrency
    from grader.workspace.view import GradingView
    from grader.workspace.workspace import Workspace, WorkspaceError, open_workspace


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
        return importlib.import_module("grader.groups.formats").LoadFailure
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
