"""Batch grading for trainers: submit a step's rows, do other work, collect one weight per row by a deadline.

:class:`BatchGrader` is the glue every framework adapter uses. ``submit(rows)`` reads the rows through a
:class:`~grader.integrations.rows.RowMapping`, builds the groups, and starts grading the mixed ones in the
background (a thread pool, or a :class:`~grader.integrations.ray.RayGrader` for many machines); it returns at
once. ``weights(rows, deadline)`` waits at most ``deadline`` seconds and returns a :class:`StepWeights`: one
weight per row, in the rows' order, 1.0 for every row whose group was not graded (skipped, failed, late,
unreadable), each with its reason, and the step's metrics.

The guard (:class:`GuardConfig`): the policy is trained against this grader and will learn to please it.
Trajectories whose patch addresses the grader (``grader.graders.tools.find_injections``) are ranked last
among the passing ones; a sampled share of groups is graded a second time (fresh labels: the LLM grader
draws new ones per grading unless its seed is fixed), and when the two gradings agree less than
``min_agreement`` (mean Kendall tau-b), or the share of flagged trajectories jumps above its running mean by
more than ``max_flag_jump``, the whole step falls back to 1.0 with the reason logged: a drifting grader can
slow learning, not steer it.

Faults never reach the trainer: a grader that raises, an actor that dies, or the Ray runtime failing costs
the groups concerned (1.0, with the reason). Only misuse raises: a row mapping that cannot read a required
field (:class:`~grader.integrations.rows.RowError`), ``weights()`` for rows never submitted or collected
twice (:class:`CollectError`).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from grader.errors import GagarError
from grader.evaluation import metrics as ranking_metrics
from grader.graders.base import Grader
from grader.graders.tools import find_injections
from grader.integrations.rows import RowGroup, RowMapping, group_rows, parse_rows
from grader.length import read_step
from grader.models import Group, GroupResult
from grader.outcomes import Outcome
from grader.pipeline import GradingOptions, grade_group_sync, passthrough
from grader.redistribute import is_mixed_group, rank_to_weights, shrink_weights

if TYPE_CHECKING:
    from grader.integrations.ray import RayGrader

__all__ = ["BatchGrader", "CollectError", "GuardConfig", "StepWeights"]

log = logging.getLogger("gagar.trainer")

LATE = "late"
UNGRADED = "ungraded"
GUARD = "guard"
TOP_REASONS = 3


class CollectError(GagarError, RuntimeError):
    """``weights()`` asked for rows that were never submitted, or whose weights were already collected."""


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


@dataclass
class StepWeights:
    """What ``weights()`` returns for one step's rows (all per-row lists are in the rows' order)."""

    weights: np.ndarray
    """One weight per row; 1.0 wherever there is no grade to apply."""
    outcomes: list[str]
    """Per row: graded, skipped, failed, late, ungraded, or guard (fallback)."""
    reasons: list[str]
    """Per row: why its weight is 1.0 ("" when its group's grade applies)."""
    group_reasons: dict[str, str]
    """Per group: its reason, for every group not graded (and guard notes for graded ones)."""
    results: dict[str, GroupResult]
    """Per group: the result of grading, for groups that finished in time."""
    response_lengths: list[int | None]
    """Per row: the response length read from it (for length monitors)."""
    metrics: dict[str, float]
    """The step's metrics, names under ``gagar/`` (see `BatchGrader.weights`)."""
    fallback: str | None = None
    """Why the guard set every weight to 1.0 this step, if it did."""


@dataclass
class _Submission:
    groups: list[RowGroup]
    futures: dict[str, Future[GroupResult]]
    checks: dict[str, Future[GroupResult]]
    flagged: dict[str, dict[str, list[str]]]
    submitted: float
    done_at: dict[str, float] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)


class BatchGrader:
    """Grades a trainer's rows in the background; the trainer collects one weight per row by a deadline.

    Args:
        grader: the grader, run in threads (give this or `ray_grader`).
        mapping: where each row holds its fields (default: `RowMapping()`'s names).
        options: grading options (scheme, floor, preserve of the results, ...).
        workers: groups graded at once in threads.
        ray_grader: a :class:`~grader.integrations.ray.RayGrader` spreading groups over its actors.
        regrader: grades the self-check sample (default: the grader itself, which for the LLM grader with no
            fixed seed means fresh labels).
        guard: the guard's settings (`GuardConfig`).
        deadline: the default wait of `weights()` in seconds (None: until every group is done).
    Raises:
        ValueError: both or neither of `grader` and `ray_grader` given.
    """

    def __init__(
        self,
        grader: Grader | None = None,
        mapping: RowMapping | None = None,
        options: GradingOptions | None = None,
        *,
        workers: int = 4,
        ray_grader: RayGrader | None = None,
        regrader: Grader | None = None,
        guard: GuardConfig | None = None,
        deadline: float | None = None,
    ) -> None:
        if (grader is None) == (ray_grader is None):
            raise ValueError("give exactly one of grader (threads) or ray_grader (Ray actors)")
        self.grader = grader
        self.ray_grader = ray_grader
        self.regrader = regrader or grader
        self.mapping = mapping or RowMapping()
        self.options = options or GradingOptions()
        self.guard = guard or GuardConfig()
        self.deadline = deadline
        self.name = grader.name if grader is not None else ray_grader.name  # type: ignore[union-attr]
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="gagar-batch")
        self._lock = threading.Lock()
        self._owner: dict[tuple[str, str], _Submission] = {}
        self._flag_history: list[float] = []
        self._rng = random.Random(self.guard.seed)

    # -- submit -----------------------------------------------------------------------------------------

    def submit(self, rows: Sequence[Any]) -> int:
        """Start grading the mixed groups among `rows` in the background; returns at once.

        Args:
            rows: the step's rows (any order; groups need not be contiguous).
        Returns:
            how many groups were sent to the grader.
        Raises:
            RowError: a row's group id, trajectory id, pass flag or response length is missing or malformed.
            CollectError: a row's group was already submitted and not yet collected.
        """
        groups = group_rows(parse_rows(rows, self.mapping))
        now = time.monotonic()
        submission = _Submission(groups, {}, {}, {}, now)
        with self._lock:
            # A group is graded whole: one pending submission per group id.
            pending = {gid for gid, _ in self._owner}
            clash = [g.group_id for g in groups if g.group_id in pending]
            if clash:
                raise CollectError(f"group {clash[0]!r} was submitted and not yet collected")
            for g in groups:
                for key in g.keys:
                    self._owner[key] = submission
        mixed = [g for g in groups if g.group is not None and _is_mixed(g.group)]
        for g in mixed:
            assert g.group is not None
            submission.flagged[g.group_id] = {
                t.id: hits for t in g.group.trajectories if t.passed and (hits := find_injections(t.patch))
            }
        sample = self._sample(mixed)
        if self.ray_grader is not None:
            self._submit_ray(submission, [g.group for g in mixed if g.group is not None], sample)
        else:
            for g in mixed:
                assert g.group is not None
                future = self._pool.submit(_grade_safely, g.group, self.grader, self.options)
                self._track(submission, g.group_id, future)
                if g.group_id in sample:
                    submission.checks[g.group_id] = self._pool.submit(
                        _grade_safely, g.group, self.regrader, self.options
                    )
        return len(mixed)

    def _sample(self, mixed: list[RowGroup]) -> set[str]:
        share = self.guard.self_check_share
        if share <= 0 or not mixed:
            return set()
        count = max(1, round(share * len(mixed)))
        return {g.group_id for g in self._rng.sample(mixed, min(count, len(mixed)))}

    def _track(self, submission: _Submission, group_id: str, future: Future[GroupResult]) -> None:
        submission.futures[group_id] = future
        future.add_done_callback(lambda _: submission.done_at.setdefault(group_id, time.monotonic()))

    def _submit_ray(self, submission: _Submission, groups: list[Group], sample: set[str]) -> None:
        jobs: list[tuple[Group, Future[GroupResult]]] = []
        for group in groups:
            future: Future[GroupResult] = Future()
            self._track(submission, group.group_id, future)
            jobs.append((group, future))
            if group.group_id in sample:
                check: Future[GroupResult] = Future()
                submission.checks[group.group_id] = check
                jobs.append((group, check))
        if not jobs:
            return
        ray_grader = self.ray_grader
        assert ray_grader is not None

        def run() -> None:
            try:
                for index, result in ray_grader.grade_indexed([g for g, _ in jobs], stop=submission.stop):
                    _resolve(jobs[index][1], result)
            except Exception as exc:  # the Ray runtime itself failed: those groups only, never the step
                reason = f"ray: {type(exc).__name__}: {exc}"
                for group, future in jobs:
                    _resolve(future, passthrough(group, self.name, reason, Outcome.DISTRIBUTED))

        threading.Thread(target=run, name="gagar-batch-ray", daemon=True).start()

    # -- collect ----------------------------------------------------------------------------------------

    def weights(self, rows: Sequence[Any], deadline: float | None = None) -> StepWeights:
        """Wait at most `deadline` seconds for the rows' groups, then return one weight per row.

        Metrics (names under ``gagar/``): ``groups``; ``graded``, ``skipped``, ``failed``, ``late``,
        ``ungraded`` (shares of groups); ``failed/<outcome>`` for the top reasons; ``weight_min``,
        ``weight_std`` (passing rows of graded groups); ``latency_p50``, ``latency_p95`` (seconds from
        submit to each result); ``waited`` (seconds spent in this call); ``flag_share`` (passing
        trajectories of mixed groups flagged for addressing the grader); ``position_bias`` (how much more
        often the candidate shown first is ranked first than chance, for graders that report what they
        showed); ``self_agreement`` and ``self_checked``; ``guard_fallback`` (1 when the guard reset the
        step).

        Args:
            rows: the rows submitted (any order, any subset of one or more submissions).
            deadline: seconds to wait at most (default: the grader's `deadline`; None waits for all).
        Returns:
            the `StepWeights`, per row in the order of `rows`.
        Raises:
            RowError: as `submit`.
            CollectError: a row was never submitted, or its weights were already collected.
        """
        start = time.monotonic()
        deadline = self.deadline if deadline is None else deadline
        parsed = parse_rows(rows, self.mapping)
        with self._lock:
            submissions: list[_Submission] = []
            for row in parsed:
                owner = self._owner.get((row.group_id, row.trajectory_id))
                if owner is None:
                    raise CollectError(
                        f"row {row.index}: trajectory {row.trajectory_id!r} of group {row.group_id!r} was "
                        "never submitted, or its weights were already collected"
                    )
                if owner not in submissions:
                    submissions.append(owner)
            for submission in submissions:
                for g in submission.groups:
                    for key in g.keys:
                        self._owner.pop(key, None)
        futures = [f for s in submissions for f in (*s.futures.values(), *s.checks.values())]
        remaining = None if deadline is None else max(0.0, deadline - (time.monotonic() - start))
        wait_futures(futures, timeout=remaining)
        waited = time.monotonic() - start
        for submission in submissions:
            submission.stop.set()
            for future in (*submission.futures.values(), *submission.checks.values()):
                future.cancel()  # queued gradings never start; running ones finish and are discarded
        return self._assemble(parsed, submissions, waited, deadline)

    def _assemble(
        self, parsed: list[Any], submissions: list[_Submission], waited: float, deadline: float | None
    ) -> StepWeights:
        groups: dict[str, RowGroup] = {}
        results: dict[str, GroupResult] = {}
        late: set[str] = set()
        checks: dict[str, GroupResult] = {}
        flagged: dict[str, dict[str, list[str]]] = {}
        latencies: list[float] = []
        for s in submissions:
            flagged.update(s.flagged)
            for g in s.groups:
                groups[g.group_id] = g
            for gid, future in s.futures.items():
                if future.done() and not future.cancelled():
                    results[gid] = future.result()
                    latencies.append(s.done_at.get(gid, time.monotonic()) - s.submitted)
                else:
                    late.add(gid)
            for gid, future in s.checks.items():
                if future.done() and not future.cancelled():
                    checks[gid] = future.result()
        problems = {g.group_id: g.problem for g in group_rows(parsed) if g.problem}
        group_reasons: dict[str, str] = {}
        group_weights: dict[str, dict[str, float]] = {}
        outcome_of: dict[str, str] = {}
        for gid, g in groups.items():
            if g.group is None:
                # Named by the rows as given to this call (the trainer may have reordered them since submit).
                problem = problems.get(gid, g.problem)
                outcome_of[gid], group_reasons[gid] = UNGRADED, f"ungraded: {problem}"
            elif gid in late:
                waited_for = "every group" if deadline is None else f"{deadline:g}s"
                outcome_of[gid] = LATE
                group_reasons[gid] = f"late: not graded within the {waited_for} deadline; weights 1.0"
            elif gid not in results:
                outcome_of[gid] = "skipped"
                group_reasons[gid] = f"skipped: {_skip_text(g.group)}"
            else:
                result = results[gid]
                outcome_of[gid] = result.status
                if result.status != "graded":
                    group_reasons[gid] = f"{result.status}: {result.reason}"
                    continue
                weights = dict(result.weights)
                hits = {tid: h for tid, h in flagged.get(gid, {}).items() if tid in weights}
                for tid, lines in result.flags.items():
                    if tid in weights:
                        hits.setdefault(tid, lines)
                if hits and self.guard.flagged_last:
                    weights = self._flagged_last(result, set(hits))
                    named = ", ".join(sorted(hits))
                    group_reasons[gid] = f"flagged for addressing the grader, ranked last: {named}"
                group_weights[gid] = weights
        flag_share = _flag_share(groups, flagged)
        agreement = _agreement(results, checks)
        fallback = self._fallback(flag_share, agreement, len([1 for c in checks if c in results]))
        n = len(parsed)
        out = np.ones(n, dtype=np.float64)
        outcomes, reasons = [""] * n, [""] * n
        for position, row in enumerate(parsed):
            gid = row.group_id
            outcomes[position] = outcome_of[gid]
            if gid in group_weights and fallback is None:
                out[position] = group_weights[gid].get(row.trajectory_id, 1.0)
            elif gid in group_weights:
                outcomes[position], reasons[position] = GUARD, f"guard: {fallback}"
            else:
                reasons[position] = group_reasons[gid]
        metrics = self._metrics(
            outcome_of, results, group_weights, latencies, waited, flag_share, agreement, checks, fallback
        )
        if fallback is not None:
            log.warning("gagar guard: this step's weights fall back to 1.0: %s", fallback)
        return StepWeights(
            weights=out,
            outcomes=outcomes,
            reasons=reasons,
            group_reasons=group_reasons,
            results=results,
            response_lengths=[row.response_length for row in parsed],
            metrics=metrics,
            fallback=fallback,
        )

    def _flagged_last(self, result: GroupResult, flagged: set[str]) -> dict[str, float]:
        ranking = [[t for t in tier if t not in flagged] for tier in result.ranking]
        last = [t for tier in result.ranking for t in tier if t in flagged]
        ranking = [tier for tier in ranking if tier] + [last]
        weights = rank_to_weights(ranking, self.options.scheme, **self.options.weight_params())
        if result.certainty is not None:
            weights = shrink_weights(weights, result.certainty)
        return weights

    def _fallback(self, flag_share: float | None, agreement: float | None, checked: int) -> str | None:
        reasons = []
        if agreement is not None and agreement < self.guard.min_agreement:
            reasons.append(
                f"self-agreement {agreement:.2f} < {self.guard.min_agreement:g} on {checked} re-graded groups"
            )
        if flag_share is not None:
            baseline = float(np.mean(self._flag_history)) if self._flag_history else 0.0
            if flag_share - baseline > self.guard.max_flag_jump:
                reasons.append(
                    f"flagged share {flag_share:.2f} jumped above its running mean {baseline:.2f} "
                    f"by more than {self.guard.max_flag_jump:g}"
                )
            self._flag_history.append(flag_share)
        return "; ".join(reasons) or None

    def _metrics(
        self,
        outcome_of: dict[str, str],
        results: dict[str, GroupResult],
        group_weights: dict[str, dict[str, float]],
        latencies: list[float],
        waited: float,
        flag_share: float | None,
        agreement: float | None,
        checks: dict[str, GroupResult],
        fallback: str | None,
    ) -> dict[str, float]:
        n = len(outcome_of)
        counts = Counter(outcome_of.values())
        metrics: dict[str, float] = {"gagar/groups": float(n), "gagar/waited": waited}
        for name in ("graded", "skipped", "failed", LATE, UNGRADED):
            metrics[f"gagar/{name}"] = counts[name] / n if n else 0.0
        failures = Counter(
            r.outcome.value if r.outcome else "failed" for r in results.values() if r.status == "failed"
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
        bias = _position_bias(results)
        if bias is not None:
            metrics["gagar/position_bias"] = bias
        if agreement is not None:
            metrics["gagar/self_agreement"] = agreement
        # The length monitor (grader.length): Kendall tau of credit with length, and the lengths of the
        # top- and bottom-ranked trajectories, averaged over this step's graded groups.
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

    def discard_pending(self) -> int:
        """Forget every submission not yet collected (groups the trainer dropped, e.g. by a filter).

        Queued gradings are cancelled, running ones finish and are discarded; their rows may be submitted
        again.

        Returns:
            how many groups were discarded.
        """
        with self._lock:
            pending = {id(s): s for s in self._owner.values()}
            self._owner.clear()
        for submission in pending.values():
            submission.stop.set()
            for future in (*submission.futures.values(), *submission.checks.values()):
                future.cancel()
        return sum(len(s.groups) for s in pending.values())

    def close(self) -> None:
        """Stop the worker threads (running gradings finish first); the Ray grader is left to its owner."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def _is_mixed(group: Group) -> bool:
    return is_mixed_group([bool(t.passed) for t in group.trajectories])


def _skip_text(group: Group) -> str:
    passed = [bool(t.passed) for t in group.trajectories]
    if not any(passed):
        return Outcome.NO_PASSING.text
    return Outcome.ALL_PASSED.text


def _resolve(future: Future[GroupResult], result: GroupResult) -> None:
    # The trainer may have stopped waiting (the future cancelled) just before the result came.
    with contextlib.suppress(InvalidStateError):
        if not future.done():
            future.set_result(result)


def _grade_safely(group: Group, grader: Grader | None, options: GradingOptions) -> GroupResult:
    assert grader is not None
    try:
        return grade_group_sync(group, grader, options)
    except Exception as exc:  # grade_group_sync catches group errors; anything left must not kill the step
        reason = f"group {group.group_id!r}: {type(exc).__name__}: {exc}"
        return passthrough(group, grader.name, reason, Outcome.INTERNAL_ERROR)


def _flag_share(groups: dict[str, RowGroup], flagged: dict[str, dict[str, list[str]]]) -> float | None:
    passing = sum(
        1 for gid in flagged if (g := groups[gid].group) is not None for t in g.trajectories if t.passed
    )
    if not passing:
        return None
    return sum(len(hits) for hits in flagged.values()) / passing


def _agreement(results: dict[str, GroupResult], checks: dict[str, GroupResult]) -> float | None:
    taus = []
    for gid, check in checks.items():
        first = results.get(gid)
        if first is None or first.status != "graded" or check.status != "graded":
            continue
        value = ranking_metrics.agreement([first.ranking, check.ranking])
        if value is not None:
            taus.append(value)
    return float(np.mean(taus)) if taus else None


def _position_bias(results: dict[str, GroupResult]) -> float | None:
    shown, rankings = [], []
    for result in results.values():
        labels, order = result.details.get("labels"), result.details.get("shown")
        if result.status == "graded" and isinstance(labels, dict) and isinstance(order, list):
            shown.append([list(labels[label]) for label in order if label in labels])
            rankings.append(result.ranking)
    if not shown:
        return None
    bias = ranking_metrics.position_bias(shown, rankings)
    return bias.first_ranked_first - bias.chance
