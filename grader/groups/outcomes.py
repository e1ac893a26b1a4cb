"""Typed outcomes: why a group was graded, skipped or failed, and why redistribution left it unchanged.

A result carries both the code (`GroupResult.outcome`, `GroupResult.redistribution_outcome`), which programs
group and count by, and a reason in words (`GroupResult.reason`, `GroupResult.redistribution`), which names
the group's own specifics (ids, paths, numbers). A code's `text` is the general form of its reason, for
tables that aggregate many groups.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

Status = Literal["graded", "skipped", "failed"]


class Outcome(str, Enum):
    """How one group ended. `status` is what results.jsonl reports under `status`."""

    GRADED = "graded"
    NO_PASSING = "no_passing"
    ALL_PASSED = "all_passed"
    SINGLE_PASSING = "single_passing"
    INVALID_GROUP = "invalid_group"
    WORKSPACE = "workspace"
    BASE_MISSING = "base_missing"
    NO_GRADABLE = "no_gradable"
    GRADER_FAILED = "grader_failed"
    INVALID_RANKING = "invalid_ranking"
    INTERNAL_ERROR = "internal_error"
    DEADLINE = "deadline"
    ACTOR_DIED = "actor_died"
    DISTRIBUTED = "distributed"
    UNGRADED = "ungraded"
    GUARD = "guard"

    @property
    def status(self) -> Status:
        """graded, skipped or failed: the coarse `GroupResult.status` of a group that ended this way."""
        if self is Outcome.GRADED:
            return "graded"
        if self in _SKIPS:
            return "skipped"
        return "failed"

    @property
    def text(self) -> str:
        return _OUTCOME_TEXT[self]


_SKIPS = frozenset({Outcome.NO_PASSING, Outcome.ALL_PASSED, Outcome.SINGLE_PASSING})
_OUTCOME_TEXT = {
    Outcome.GRADED: "graded",
    Outcome.NO_PASSING: "no passing trajectory: nothing to rank",
    Outcome.ALL_PASSED: "every trajectory passed: no contrast",
    Outcome.SINGLE_PASSING: "a single passing trajectory: nothing to rank it against",
    Outcome.INVALID_GROUP: "not a valid group",
    Outcome.WORKSPACE: "the workspace could not be built",
    Outcome.BASE_MISSING: "the base commit does not exist",
    Outcome.NO_GRADABLE: "no passing trajectory has a patch that applies",
    Outcome.GRADER_FAILED: "the grader failed",
    Outcome.INVALID_RANKING: "the grader's ranking was invalid",
    Outcome.INTERNAL_ERROR: "an unexpected error",
    Outcome.DEADLINE: "not graded before the deadline",
    Outcome.ACTOR_DIED: "the grading worker died",
    Outcome.DISTRIBUTED: "the distributed runtime failed",
    Outcome.UNGRADED: "the trainer's rows do not make a group (a row without patch or task)",
    Outcome.GUARD: "graded, but the step's guard set every weight to 1.0",
}


class RedistributionOutcome(str, Enum):
    """What redistribution did to a graded group: applied, or left it unchanged (the identity) and why."""

    APPLIED = "applied"
    NO_PASSING = "no_passing"
    BAD_ADVANTAGE = "bad_advantage"
    BAD_WEIGHT = "bad_weight"
    UNIFORM = "uniform"
    BAD_SCALE = "bad_scale"
    NEEDS_LENGTHS = "needs_lengths"

    @property
    def applied(self) -> bool:
        return self is RedistributionOutcome.APPLIED

    @property
    def text(self) -> str:
        return _REDISTRIBUTION_TEXT[self]

    def describe(self) -> str:
        """The words results.jsonl keeps under `redistribution`: "applied" or "identity: <why>"."""
        return "applied" if self.applied else f"identity: {self.text}"


_REDISTRIBUTION_TEXT = {
    RedistributionOutcome.APPLIED: "applied",
    RedistributionOutcome.NO_PASSING: "no passing trajectory",
    RedistributionOutcome.BAD_ADVANTAGE: "passing advantage <= 0 or not finite: cannot redistribute",
    RedistributionOutcome.BAD_WEIGHT: "passing weight <= 0 or not finite: cannot redistribute",
    RedistributionOutcome.UNIFORM: "uniform weights",
    RedistributionOutcome.BAD_SCALE: (
        "rescale factor not finite or not positive (advantage sums overflow or underflow)"
    ),
    RedistributionOutcome.NEEDS_LENGTHS: "preserve='token' needs response_length on every graded trajectory",
}
