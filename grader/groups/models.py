"""Validated models at the boundary: what a group file holds, and what a graded group becomes.

Everything that crosses into gagar (a group file line, an imported prediction) is parsed into these models
first; nothing deeper in the pipeline re-validates.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from grader.groups.outcomes import Outcome, RedistributionOutcome, Status

DEFAULT_PASS_THRESHOLD = 1.0
GRPO_EPS = 1e-6


class Task(BaseModel):
    """One task: the repository and commit every trajectory of a group starts from."""

    model_config = ConfigDict(extra="forbid")

    repo: str = Field(
        description="Path or URL of a git repository; a relative path is taken from the group file."
    )
    base_commit: str = Field(min_length=1)
    statement: str = ""
    image: str | None = None
    setup: str | None = None
    test_command: str | None = None
    python: str | None = None
    """The interpreter the task needs ("3.9"); the nearest one offline stands in, and `run` says so."""
    environment: dict[str, Any] | None = None
    """The install recipe (`grader.sandbox.recipes.InstallRecipe.to_dict`) its environment layer is built
    from.

    Ignored when `image` is given: a task's own image already holds its environment."""


class Trajectory(BaseModel):
    """One rollout: its final patch, whether it passed, and its advantage."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    patch: str = ""
    passed: bool | None = None
    reward: float | None = None
    advantage: float | None = None
    response_length: int | None = Field(default=None, ge=0)
    metadata: dict[str, Any] = Field(default_factory=dict)


class Group(BaseModel):
    """A rollout group: one task and the trajectories sampled for it.

    After `complete_group` every trajectory has `passed` set and, when any trajectory lacked an advantage,
    every advantage is the group's GRPO advantage, from rewards (or from pass flags where no reward is given).
    """

    model_config = ConfigDict(extra="forbid")

    group_id: str = Field(min_length=1)
    task: Task
    trajectories: list[Trajectory] = Field(min_length=1)

    @field_validator("trajectories")
    @classmethod
    def _unique_ids(cls, trajectories: list[Trajectory]) -> list[Trajectory]:
        seen: set[str] = set()
        duplicates = sorted({t.id for t in trajectories if t.id in seen or seen.add(t.id)})  # type: ignore[func-returns-value]
        if duplicates:
            raise ValueError(f"duplicate trajectory ids: {', '.join(duplicates)}")
        return trajectories

    @model_validator(mode="after")
    def _finite_numbers(self) -> Group:
        for t in self.trajectories:
            for name in ("reward", "advantage"):
                value = getattr(t, name)
                if value is not None and not math.isfinite(value):
                    raise ValueError(f"trajectory {t.id!r}: {name} is {value!r}, not a finite number")
        return self

    def trajectory(self, trajectory_id: str) -> Trajectory:
        """The trajectory with this id. Raises KeyError naming the group and the id when there is none."""
        for t in self.trajectories:
            if t.id == trajectory_id:
                return t
        raise KeyError(f"group {self.group_id!r} has no trajectory {trajectory_id!r}")


def complete_group(
    group: Group, pass_threshold: float = DEFAULT_PASS_THRESHOLD, eps: float = GRPO_EPS
) -> Group:
    """Fill in `passed` from rewards and advantages GRPO-style, returning a new group.

    `passed` defaults to `reward >= pass_threshold`. When any advantage is missing, all are computed as
    (r - mean) / (std + eps) over the group, with the unbiased std as verl and TRL compute it (a group of one
    gets std 1); r is the reward, or the pass flag as 0/1 where no reward is given.

    Raises:
        ValueError: a trajectory has neither `passed` nor `reward` (the message names it).
    """
    trajectories = []
    for t in group.trajectories:
        passed = t.passed
        if passed is None:
            if t.reward is None:
                raise ValueError(f"trajectory {t.id!r} has neither `passed` nor `reward`")
            passed = t.reward >= pass_threshold
        trajectories.append(t.model_copy(update={"passed": passed}))
    if any(t.advantage is None for t in trajectories):
        rewards = [t.reward if t.reward is not None else float(bool(t.passed)) for t in trajectories]
        n = len(rewards)
        mean = sum(rewards) / n
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (n - 1)) if n > 1 else 1.0
        trajectories = [
            t.model_copy(update={"advantage": (r - mean) / (std + eps)})
            for t, r in zip(trajectories, rewards, strict=True)
        ]
    return group.model_copy(update={"trajectories": trajectories})


class PatchStats(BaseModel):
    """What a patch touches, from unidiff."""

    files: list[str] = Field(default_factory=list)
    files_touched: int = 0
    lines_added: int = 0
    lines_removed: int = 0
    new_files: list[str] = Field(default_factory=list)
    deleted_files: list[str] = Field(default_factory=list)
    renamed_files: list[str] = Field(default_factory=list)
    test_files: list[str] = Field(default_factory=list)
    binary_files: list[str] = Field(default_factory=list)


class TrajectoryReport(BaseModel):
    """Per-trajectory facts in a result line: how its patch applied, what it touches, what the grader saw."""

    passed: bool
    branch: str | None = None
    apply_method: str | None = None
    tolerated: list[str] = Field(default_factory=list)
    """What a tolerant apply method tolerated (whitespace, unmatched context, a 3-way merge), a line each."""
    error: str | None = None
    patch_class: int | None = None
    stats: PatchStats | None = None
    signals: dict[str, Any] = Field(default_factory=dict)
    rationale: str | None = None


class LengthSignal(BaseModel):
    """Does a graded group's credit follow length? Kendall's tau-b over its ranked trajectories (see
    `grader.ranking.length`): +1 when longer always got more credit, -1 when shorter always did, None when
    either side is all ties (or fewer than two were ranked)."""

    source: Literal["response_length", "patch_size"]
    """What `lengths` are: response tokens from the group file, or, when any ranked trajectory lacks
    `response_length`, its patch size in changed lines (so `*_vs_length` repeat `*_vs_patch_size`)."""
    n: int
    """Ranked trajectories the correlations are taken over."""
    weight_vs_length: float | None = None
    advantage_vs_length: float | None = None
    """Against the advantage after redistribution (before it, passing advantages often all tie)."""
    weight_vs_patch_size: float | None = None
    advantage_vs_patch_size: float | None = None
    top_length: float | None = None
    """Mean length of the first tier of the ranking."""
    bottom_length: float | None = None
    """Mean length of the last tier."""
    lengths: dict[str, float] = Field(default_factory=dict)
    """Length of each ranked trajectory, in `source` units."""
    patch_sizes: dict[str, int] = Field(default_factory=dict)
    """Changed lines (added + removed) of each ranked trajectory's patch."""


class GroupResult(BaseModel):
    """One line of results.jsonl: everything known about one group after grading."""

    group_id: str
    status: Status
    reason: str = ""
    outcome: Outcome | None = None
    """Why the group ended as it did, as a code (see `grader.groups.outcomes`); `reason` says it in words."""
    grader: str
    ranking: list[list[str]] = Field(default_factory=list)
    weights: dict[str, float] = Field(default_factory=dict)
    advantages_before: dict[str, float | None] = Field(default_factory=dict)
    advantages_after: dict[str, float | None] = Field(default_factory=dict)
    redistribution: str = ""
    redistribution_outcome: RedistributionOutcome | None = None
    """What redistribution did, as a code; `redistribution` says it in words."""
    certainty: float | None = None
    """The grader's certainty when it stated one (also under `details["weight_shrink"]`)."""
    trajectories: dict[str, TrajectoryReport] = Field(default_factory=dict)
    flags: dict[str, list[str]] = Field(default_factory=dict)
    usage: dict[str, int] = Field(default_factory=dict)
    transcript: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    seconds: float = 0.0
    length: LengthSignal | None = None
    """The length-growth monitor's reading of a graded group (None for the others)."""


GroupGrade = GroupResult
"""What `grade_group` returns: the result line of one group (the same model as a results.jsonl line)."""
