"""gagar: Groupwise Agentic Grading and Advantage Redistribution.

The public API. Load groups, grade them, redistribute advantages:

    from grader import get_grader, grade_groups, load_groups
    for result in grade_groups(load_groups(["examples/inventory_group.json"]), get_grader("heuristic")):
        print(result.ranking, result.advantages_after)

In asyncio code, `await grade_group(group, grader)` grades one group without blocking the loop.
"""

from grader.cache import CachedGrader, GradeCache
from grader.concurrency import Concurrency
from grader.errors import GagarError
from grader.formats import LoadError, import_swebench, load_group_file, load_groups, parse_group
from grader.graders import Grade, Grader, GradingFailed, get_grader
from grader.graders.base import register_grader
from grader.integrations.tensors import redistribute_advantages
from grader.models import Group, GroupGrade, GroupResult, Task, Trajectory
from grader.pipeline import GradingOptions, grade_group, grade_group_sync, grade_groups, write_results
from grader.ranking import InvalidRanking, validate_ranking
from grader.redistribute import (
    is_mixed_group,
    mixed_group_mask,
    rank_to_weights,
    redistribute_batch,
    redistribute_group,
)
from grader.view import GradingView
from grader.workspace import Workspace, WorkspaceError, open_workspace

__version__ = "0.1.0"

__all__ = [
    "CachedGrader",
    "Concurrency",
    "GagarError",
    "GradingView",
    "redistribute_advantages",
    "register_grader",
    "Grade",
    "GradeCache",
    "Grader",
    "GradingFailed",
    "GradingOptions",
    "Group",
    "GroupGrade",
    "GroupResult",
    "InvalidRanking",
    "LoadError",
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
    "redistribute_batch",
    "redistribute_group",
    "validate_ranking",
    "write_results",
]
