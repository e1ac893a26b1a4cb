"""The metrics a trainer logs for each collection of `BatchGrader.weights` (names under ``gagar/``): how the
step's groups ended, the weights applied, latencies, the guard's readings, position bias and the length
monitor's."""

from __future__ import annotations

from collections import Counter

import numpy as np

from grader.groups.models import GroupResult
from grader.groups.outcomes import Outcome
from grader.ranking import agreement as ranking_agreement
from grader.ranking.length import read_step

__all__ = ["TOP_REASONS", "position_bias_of", "step_metrics"]

TOP_REASONS = 3
"""How many failure codes get a ``gagar/failed/<code>`` metric (the most frequent)."""


def step_metrics(
    outcome_of: dict[str, Outcome],
    results: dict[str, GroupResult],
    group_weights: dict[str, dict[str, float]],
    latencies: list[float],
    waited: float,
    flag_share: float | None,
    agreement: float | None,
    checks: dict[str, GroupResult],
    fallback: str | None,
) -> dict[str, float]:
    """The metrics of one collection, names under ``gagar/`` (`BatchGrader.weights` lists them).

    Args:
        outcome_of: each group's outcome.
        results: the results of the groups graded in time.
        group_weights: each graded group's weights as applied (flagged trajectories last).
        latencies: seconds from submission to each result.
        waited: seconds the collection waited.
        flag_share: the guard's flagged share (None: nothing scanned).
        agreement: the guard's self-agreement (None: nothing re-graded).
        checks: the self-check results.
        fallback: why the guard reset the step, if it did.
    """
    n = len(outcome_of)
    # Late and ungraded groups are counted apart from other failures (a deadline, or the trainer's
    # rows, rather than the grading), whichever path (threads or Ray) reported the deadline.
    apart = {Outcome.DEADLINE: "late", Outcome.UNGRADED: "ungraded"}
    counts = Counter(apart.get(outcome, outcome.status) for outcome in outcome_of.values())
    metrics: dict[str, float] = {"gagar/groups": float(n), "gagar/waited": waited}
    for name in ("graded", "skipped", "failed", "late", "ungraded"):
        metrics[f"gagar/{name}"] = counts[name] / n if n else 0.0
    failures = Counter(
        outcome.value
        for outcome in outcome_of.values()
        if outcome.status == "failed" and outcome not in apart
    )
    for code, count in failures.most_common(TOP_REASONS):
        metrics[f"gagar/failed/{code}"] = count / n
    passing = [w for weights in group_weights.values() for w in weights.values()]
    if passing:
        metrics["gagar/weight_min"] = float(np.min(passing))
        metrics["gagar/weight_std"] = float(np.std(passing))
    if latencies:
        metrics["gagar/latency_p50"] = float(np.percentile(latencies, 50))
        metrics["gagar/latency_p95"] = float(np.percentile(latencies, 95))
    if flag_share is not None:
        metrics["gagar/flag_share"] = flag_share
    bias = position_bias_of(results)
    if bias is not None:
        metrics["gagar/position_bias"] = bias
    if agreement is not None:
        metrics["gagar/self_agreement"] = agreement
    # The length monitor (grader.ranking.length): Kendall tau of credit with length, and the lengths of
    # the top- and bottom-ranked trajectories, averaged over this step's graded groups.
    reading = read_step("step", list(results.values()))
    for name, values in (
        ("length_tau_weight", reading.taus),
        ("length_tau_advantage", reading.advantage_taus),
        ("length_tau_patch", reading.patch_taus),
        ("length_top", reading.top_lengths),
        ("length_bottom", reading.bottom_lengths),
    ):
        if values:
            metrics[f"gagar/{name}"] = float(np.mean(values))
    metrics["gagar/self_checked"] = float(sum(1 for gid in checks if gid in results))
    metrics["gagar/guard_fallback"] = float(fallback is not None)
    return metrics


def position_bias_of(results: dict[str, GroupResult]) -> float | None:
    """How much more often the candidate shown first is ranked first than chance, over the graded results
    whose grader recorded what it showed (`details["labels"]` and `details["shown"]`); None when none did."""
    shown, rankings = [], []
    for result in results.values():
        labels, order = result.details.get("labels"), result.details.get("shown")
        if result.status == "graded" and isinstance(labels, dict) and isinstance(order, list):
            shown.append([list(labels[label]) for label in order if label in labels])
            rankings.append(result.ranking)
    if not shown:
        return None
    bias = ranking_agreement.position_bias(shown, rankings)
    return bias.first_ranked_first - bias.chance
