"""Dynamic sampling: which groups are worth grading.

Only a group with both passing and failing trajectories carries a contrast the tests already trust; grading
refines credit among its passing trajectories. Other groups pass through with the reason recorded.
"""

from __future__ import annotations

from grader.groups.models import Group
from grader.groups.outcomes import Outcome


def skip_reason(group: Group, grade_all_pass: bool = False) -> tuple[Outcome, str] | None:
    """Why the group is not graded, as (outcome, reason in words), or None when it is.

    With `grade_all_pass`, groups where every trajectory passed are graded too (a standalone patch set).
    """
    passing = sum(1 for t in group.trajectories if t.passed)
    failing = len(group.trajectories) - passing
    if passing == 0:
        return Outcome.NO_PASSING, f"no passing trajectory ({failing} failing): nothing to rank"
    if failing == 0 and not grade_all_pass:
        return (
            Outcome.ALL_PASSED,
            f"all {passing} trajectories passed: no contrast (use --grade-all-pass to grade anyway)",
        )
    if passing == 1 and failing > 0:
        return Outcome.SINGLE_PASSING, "a single passing trajectory: nothing to rank it against"
    return None
