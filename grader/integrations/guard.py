"""The guard of batch grading: the policy is trained against this grader and will learn to please it.

Trajectories whose patch addresses the grader (`grader.workspace.injections.find_injections`, read by `scan`)
are ranked last among the passing ones (`flagged_last`); a sampled share of groups is graded a second time
(fresh labels: the LLM grader draws new ones per grading unless its seed is fixed), and when the two gradings
agree less than `GuardConfig.min_agreement` (`self_agreement`: mean Kendall tau-b), or the share of flagged
trajectories (`flag_share`) jumps above its running mean by more than `GuardConfig.max_flag_jump`, the whole
step falls back to 1.0 with the reason (`fallback`): a drifting grader can slow learning, not steer it.

`BatchGrader` (`grader.integrations.batch`) runs the scan in its workers and applies the rest at collection.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grader.groups.models import Group, GroupResult
from grader.integrations.rows import RowGroup
from grader.pipeline import GradingOptions
from grader.ranking import agreement as ranking_agreement
from grader.redistribution.redistribute import rank_to_weights, shrink_weights
from grader.workspace.injections import find_injections

__all__ = ["GuardConfig", "fallback", "flag_share", "flagged_last", "scan", "self_agreement"]


@dataclass
class GuardConfig:
    """How the batch grader protects training from a grader the policy learns to please."""

    flagged_last: bool = True
    """Rank passing trajectories whose patch addresses the grader last among the passing ones."""
    self_check_share: float = 0.0
    """Share of mixed groups graded a second time, under fresh labels, to measure self-agreement (0: none)."""
    min_agreement: float = 0.5
    """Below this mean Kendall tau-b between the two gradings, the step's weights fall back to 1.0."""
    max_flag_jump: float = 0.25
    """The step falls back to 1.0 when its share of flagged passing trajectories exceeds the mean share of
    the earlier steps by more than this."""
    seed: int = 0
    """Seed of the self-check sample."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.self_check_share <= 1.0:
            raise ValueError(f"self_check_share must be in [0, 1], got {self.self_check_share!r}")
        if not -1.0 <= self.min_agreement <= 1.0:
            raise ValueError(f"min_agreement is a Kendall tau in [-1, 1], got {self.min_agreement!r}")


def scan(group: Group, cap: int) -> dict[str, list[str]]:
    """The guard's scan of a group's passing patches: trajectory id -> lines addressing the grader.

    A patch over the size cap (`cap` bytes) is not read (the workspace declines it anyway): the scan's work
    is bounded by the cap, whatever a row holds.
    """
    return {
        t.id: hits
        for t in group.trajectories
        if t.passed and len(t.patch) <= cap and (hits := find_injections(t.patch))
    }


def flagged_last(result: GroupResult, flagged: set[str], options: GradingOptions) -> dict[str, float]:
    """A graded group's weights with the `flagged` trajectories moved below every other one, made by the
    options' weight scheme and pulled toward uniform by the result's certainty, as the pipeline does."""
    ranking = [[t for t in tier if t not in flagged] for tier in result.ranking]
    last = [t for tier in result.ranking for t in tier if t in flagged]
    ranking = [tier for tier in ranking if tier] + [last]
    weights = rank_to_weights(ranking, options.scheme, **options.weight_params())
    if result.certainty is not None:
        weights = shrink_weights(weights, result.certainty)
    return weights


def flag_share(groups: dict[str, RowGroup], flagged: dict[str, dict[str, list[str]]]) -> float | None:
    """Flagged trajectories per passing trajectory of the scanned groups; None when none passed."""
    passing = sum(
        1 for gid in flagged if (g := groups[gid].group) is not None for t in g.trajectories if t.passed
    )
    if not passing:
        return None
    return sum(len(hits) for hits in flagged.values()) / passing


def self_agreement(results: dict[str, GroupResult], checks: dict[str, GroupResult]) -> float | None:
    """Mean Kendall tau-b between each group's grading and its self-check, over the groups both graded;
    None when there is none."""
    taus = []
    for gid, check in checks.items():
        first = results.get(gid)
        if first is None or first.status != "graded" or check.status != "graded":
            continue
        value = ranking_agreement.mean_tau([first.ranking, check.ranking])
        if value is not None:
            taus.append(value)
    return float(np.mean(taus)) if taus else None


def fallback(
    config: GuardConfig, history: list[float], share: float | None, agreement: float | None, checked: int
) -> str | None:
    """Why this step's weights fall back to 1.0, or None when they stand.

    Args:
        config: the guard's thresholds.
        history: the flagged shares of the earlier steps; this step's share is appended to it.
        share: this step's `flag_share` (None: nothing scanned).
        agreement: this step's `self_agreement` (None: nothing re-graded).
        checked: how many groups were re-graded, for the reason.
    """
    reasons = []
    if agreement is not None and agreement < config.min_agreement:
        reasons.append(
            f"self-agreement {agreement:.2f} < {config.min_agreement:g} on {checked} re-graded groups"
        )
    if share is not None:
        baseline = float(np.mean(history)) if history else 0.0
        if share - baseline > config.max_flag_jump:
            reasons.append(
                f"flagged share {share:.2f} jumped above its running mean {baseline:.2f} "
                f"by more than {config.max_flag_jump:g}"
            )
        history.append(share)
    return "; ".join(reasons) or None
