"""Batch grading for trainers: submit a step's rows, do other work, collect one weight per row by a deadline.

:class:`BatchGrader` is the glue every framework adapter uses. ``submit(rows)`` reads the rows through a
:class:`~grader.integrations.rows.RowMapping`, builds the groups, and starts grading the mixed ones in the
background (a thread pool, or a :class:`~grader.integrations.ray.RayGrader` for many machines); it returns at
once. ``weights(rows, deadline)`` waits at most ``deadline`` seconds and returns a :class:`StepWeights`: one
weight per row, in the rows' order, 1.0 for every row whose group was not graded (skipped, failed, late,
unreadable), each with its reason, and the step's metrics.

The guard (:class:`~grader.integrations.guard.GuardConfig`, `grader.integrations.guard`): trajectories whose
patch addresses the grader are ranked last among the passing ones, and a step whose self-check disagrees, or
whose share of flagged trajectories jumps, falls back to 1.0 with the reason logged. The gradings run on
`grader.integrations.workers.Workers`: daemon threads whose slots free at once when a grading is given up on.

Faults never reach the trainer: a grader that raises anything at all (any ``BaseException``: a bug,
``SystemExit``, a ``CancelledError``, even a ``KeyboardInterrupt`` raised in its thread), an actor that dies,
or the Ray runtime failing costs the groups concerned (1.0, with the reason). ``submit`` does no per-row work
in the caller's thread beyond reading the rows: the guard's scan runs in the worker, after the size cap.
A grading still running when the trainer stops waiting for it (late), or past ``budget`` seconds, is cut
off: its slot goes to the next group at once, and its thread, which Python cannot stop, runs on as a daemon
with its result dropped. ``close()`` returns within its ``timeout``. Only misuse raises: a row mapping that
cannot read a required field or a row value that cannot be graded
(:class:`~grader.integrations.rows.RowError`), ``weights()`` for rows never submitted or collected twice
(:class:`CollectError`), ``submit()`` after ``close()`` (:class:`BatchClosed`).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from grader.errors import GagarError
from grader.graders.base import Grader
from grader.groups.models import Group, GroupResult
from grader.groups.outcomes import Outcome
from grader.integrations.deadlines import checked_seconds, wait_seconds
from grader.integrations.guard import GuardConfig, flag_share, flagged_last, scan, self_agreement
from grader.integrations.guard import fallback as guard_fallback
from grader.integrations.rows import RowGroup, RowMapping, group_rows, parse_rows
from grader.integrations.step_metrics import step_metrics
from grader.integrations.workers import BatchClosed, Workers
from grader.pipeline import GradingOptions, grade_group_contained, passthrough
from grader.redistribution.redistribute import is_mixed_group

if TYPE_CHECKING:
    from grader.integrations.ray import RayGrader

__all__ = ["BatchClosed", "BatchGrader", "CollectError", "GuardConfig", "StepWeights"]

log = logging.getLogger("gagar.trainer")

CLOSE_WAIT = 5.0
"""Seconds `BatchGrader.close()` waits for running gradings by default before leaving them behind."""


class CollectError(GagarError, RuntimeError):
    """``weights()`` asked for rows that were never submitted, or whose weights were already collected."""


@dataclass
class StepWeights:
    """What ``weights()`` returns for one step's rows (all per-row lists are in the rows' order)."""

    weights: np.ndarray
    """One weight per row; 1.0 wherever there is no grade to apply."""
    outcomes: list[Outcome]
    """Per row: how its group ended (`Outcome.GRADED`, a skip or failure code, `DEADLINE` when late,
    `UNGRADED` when its rows make no group), or `GUARD` where the guard reset a graded group's weights."""
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
    settled: dict[str, tuple[GroupResult | None, GroupResult | None, float | None]] = field(
        default_factory=dict
    )
    """Per group collected at least once: (result or None when late, self-check result, latency). Fixed at
    the first collection, so rows of one group collected in several calls get one outcome."""


class BatchGrader:
    """Grades a trainer's rows in the background; the trainer collects one weight per row by a deadline.

    Args:
        grader: the grader, run in threads (give this or `ray_grader`).
        mapping: where each row holds its fields (default: `RowMapping()`'s names).
        options: grading options (scheme, floor, preserve of the results, ...).
        workers: groups graded at once in threads. A grading cut off (late at collection, or over `budget`)
            no longer counts against it.
        ray_grader: a :class:`~grader.integrations.ray.RayGrader` spreading groups over its actors.
        regrader: grades the self-check sample (default: the grader itself, which for the LLM grader with no
            fixed seed means fresh labels).
        guard: the guard's settings (`GuardConfig`).
        deadline: the default wait of `weights()` in seconds (None or `math.inf`: until every group is
            done; a negative one: no wait). Checked here, as every deadline is
            (`grader.integrations.deadlines`).
        budget: seconds a grading may run in a thread before it is cut off: its group fails with the reason
            (outcome `deadline`) and its slot goes to the next group (None or `math.inf`: only collection
            cuts off).
    Raises:
        ValueError: both or neither of `grader` and `ray_grader` given, a budget that is not positive, or a
            deadline or budget that is NaN.
        TypeError: a deadline or budget that is not a number.
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
        budget: float | None = None,
    ) -> None:
        if (grader is None) == (ray_grader is None):
            raise ValueError("give exactly one of grader (threads) or ray_grader (Ray actors)")
        deadline = checked_seconds(deadline, "deadline")
        budget = checked_seconds(budget, "budget")
        if budget is not None and not budget > 0:
            raise ValueError(f"budget is a number of seconds above 0, got {budget!r}")
        self.grader = grader
        self.ray_grader = ray_grader
        self.regrader = regrader or grader
        self.mapping = mapping or RowMapping()
        self.options = options or GradingOptions()
        self.guard = guard or GuardConfig()
        self.deadline = deadline
        self.budget = budget
        self.name = grader.name if grader is not None else ray_grader.name  # type: ignore[union-attr]
        self._workers = Workers(workers)
        self._lock = threading.Lock()
        self._owner: dict[tuple[str, str], _Submission] = {}
        self._flag_history: list[float] = []
        self._rng = random.Random(self.guard.seed)

    # -- submit -----------------------------------------------------------------------------------------

    def submit(self, rows: Sequence[Any]) -> int:
        """Start grading the mixed groups among `rows` in the background; returns at once.

        Only the rows are read here; the guard's scan of each patch and the grading run in the workers.

        Args:
            rows: the step's rows (any order; groups need not be contiguous).
        Returns:
            how many groups were sent to the grader.
        Raises:
            RowError: a row's group id, trajectory id, pass flag or response length is missing or malformed
                (a response length that is not a finite count of tokens included).
            CollectError: a row's group was already submitted and not yet collected.
            BatchClosed: `close()` was called; nothing of this call is left pending.
        """
        if self._workers.closed:
            raise BatchClosed("the batch grader is closed: submit() after close()")
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
        mixed = [g.group for g in groups if g.group is not None and _is_mixed(g.group)]
        sample = self._sample(mixed)
        try:
            if self.ray_grader is not None:
                self._submit_ray(submission, mixed, sample)
            else:
                for group in mixed:
                    self._track(submission, group.group_id, self._start(group, self.grader, submission))
                    if group.group_id in sample:
                        check = self._start(group, self.regrader, None)
                        submission.checks[group.group_id] = check
        except BatchClosed:  # closed while this call ran: take back what it registered
            self._forget(submission)
            raise
        return len(mixed)

    def _start(
        self, group: Group, grader: Grader | None, submission: _Submission | None
    ) -> Future[GroupResult]:
        """Queue one grading (with the guard's scan first when `submission` records it) on the workers."""
        options, cap = self.options, self.options.max_patch_bytes

        def run(future: Future[GroupResult]) -> GroupResult:
            budget = wait_seconds(self.budget)  # None past threading.TIMEOUT_MAX: a Timer would overflow
            if budget is not None:  # the budget runs from the grading's start, not from the queue
                timer = threading.Timer(budget, self._cut_off, (future, group))
                timer.daemon = True
                timer.start()
                future.add_done_callback(lambda _: timer.cancel())
            if submission is not None:
                submission.flagged[group.group_id] = scan(group, cap)
            return grade_group_contained(group, grader, options)  # type: ignore[arg-type]

        return self._workers.submit(run)

    def _cut_off(self, future: Future[GroupResult], group: Group) -> None:
        """A grading over its budget: its group fails with the reason, and its slot is freed."""
        reason = f"group {group.group_id!r}: cut off after its {self.budget:g}s budget; weights 1.0"
        _resolve(future, passthrough(group, self.name, reason, Outcome.DEADLINE))
        self._workers.abandon(future)

    def _forget(self, submission: _Submission) -> None:
        with self._lock:
            for g in submission.groups:
                for key in g.keys:
                    if self._owner.get(key) is submission:
                        del self._owner[key]
        self._abandon(submission, [g.group_id for g in submission.groups])

    def _abandon(self, submission: _Submission, group_ids: Sequence[str]) -> None:
        """Stop the gradings of these groups: queued ones never start, running ones free their slots."""
        for gid in group_ids:
            for future in (submission.futures.get(gid), submission.checks.get(gid)):
                if future is not None:
                    self._workers.abandon(future)
        if all(g.group_id in submission.settled or g.group_id in group_ids for g in submission.groups):
            submission.stop.set()  # Ray: stop waiting for this submission's tasks

    def _sample(self, mixed: list[Group]) -> set[str]:
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
        cap = self.options.max_patch_bytes

        def run() -> None:
            for group in groups:  # the guard's scan, off the caller's thread
                submission.flagged[group.group_id] = scan(group, cap)
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

        A group's outcome is fixed the first time any of its rows is collected: a grading not done by then
        is late and cut off (its slot goes to the next group); rows of the group collected later get the
        same outcome. Rows of a submission not asked for stay collectable.

        Args:
            rows: the rows submitted (any order, any subset of one or more submissions).
            deadline: seconds to wait at most (default: the grader's `deadline`; None there, or `math.inf`,
                waits for all; a negative one waits for nothing).
        Returns:
            the `StepWeights`, per row in the order of `rows`.
        Raises:
            RowError: as `submit`.
            CollectError: a row was never submitted, or its weights were already collected.
            ValueError, TypeError: the deadline is NaN, or not a number; every row stays collectable.
        """
        start = time.monotonic()
        # Checked before anything is touched: a refused deadline leaves every row collectable.
        deadline = self.deadline if deadline is None else checked_seconds(deadline, "deadline")
        parsed = parse_rows(rows, self.mapping)
        touched: dict[str, _Submission] = {}
        with self._lock:
            for row in parsed:
                owner = self._owner.get((row.group_id, row.trajectory_id))
                if owner is None:
                    raise CollectError(
                        f"row {row.index}: trajectory {row.trajectory_id!r} of group {row.group_id!r} was "
                        "never submitted, or its weights were already collected"
                    )
                touched[row.group_id] = owner
            for row in parsed:
                del self._owner[(row.group_id, row.trajectory_id)]
        futures = [
            future
            for gid, s in touched.items()
            if gid not in s.settled
            for future in (s.futures.get(gid), s.checks.get(gid))
            if future is not None
        ]
        remaining = None if deadline is None else deadline - (time.monotonic() - start)
        wait_futures(futures, timeout=wait_seconds(remaining))
        waited = time.monotonic() - start
        for gid, submission in touched.items():
            with self._lock:  # two calls collecting rows of one group settle it once
                settled = gid in submission.settled
                if not settled:
                    submission.settled[gid] = _settle(submission, gid)
            if not settled:
                self._abandon(submission, [gid])  # late ones are cut off, finished ones cost nothing
        return self._assemble(parsed, touched, waited, deadline)

    def _assemble(
        self, parsed: list[Any], touched: dict[str, _Submission], waited: float, deadline: float | None
    ) -> StepWeights:
        groups: dict[str, RowGroup] = {}
        results: dict[str, GroupResult] = {}
        late: set[str] = set()
        checks: dict[str, GroupResult] = {}
        flagged: dict[str, dict[str, list[str]]] = {}
        latencies: list[float] = []
        for gid, s in touched.items():
            groups[gid] = next(g for g in s.groups if g.group_id == gid)
            if gid in s.flagged:
                flagged[gid] = s.flagged[gid]
            if gid not in s.futures:
                continue
            result, check, latency = s.settled[gid]
            if result is None:
                late.add(gid)
                continue
            results[gid] = result
            if latency is not None:
                latencies.append(latency)
            if check is not None:
                checks[gid] = check
        problems = {g.group_id: g.problem for g in group_rows(parsed) if g.problem}
        group_reasons: dict[str, str] = {}
        group_weights: dict[str, dict[str, float]] = {}
        outcome_of: dict[str, Outcome] = {}
        for gid, g in groups.items():
            if g.group is None:
                # Named by the rows as given to this call (the trainer may have reordered them since submit).
                problem = problems.get(gid, g.problem)
                outcome_of[gid], group_reasons[gid] = Outcome.UNGRADED, f"ungraded: {problem}"
            elif gid in late:
                waited_for = "every group" if deadline is None else f"{deadline:g}s"
                outcome_of[gid] = Outcome.DEADLINE
                group_reasons[gid] = f"late: not graded within the {waited_for} deadline; weights 1.0"
            elif gid not in results:
                outcome_of[gid] = _skip_outcome(g.group)
                group_reasons[gid] = f"skipped: {outcome_of[gid].text}"
            else:
                result = results[gid]
                outcome_of[gid] = _outcome_of(result)
                if result.status != "graded":
                    group_reasons[gid] = f"{result.status}: {result.reason}"
                    continue
                weights = dict(result.weights)
                hits = {tid: h for tid, h in flagged.get(gid, {}).items() if tid in weights}
                for tid, lines in result.flags.items():
                    if tid in weights:
                        hits.setdefault(tid, lines)
                if hits and self.guard.flagged_last:
                    weights = flagged_last(result, set(hits), self.options)
                    named = ", ".join(sorted(hits))
                    group_reasons[gid] = f"flagged for addressing the grader, ranked last: {named}"
                group_weights[gid] = weights
        share = flag_share(groups, flagged)
        agreement = self_agreement(results, checks)
        checked = len([1 for c in checks if c in results])
        fallback = guard_fallback(self.guard, self._flag_history, share, agreement, checked)
        n = len(parsed)
        out = np.ones(n, dtype=np.float64)
        outcomes, reasons = [Outcome.GRADED] * n, [""] * n
        for position, row in enumerate(parsed):
            gid = row.group_id
            outcomes[position] = outcome_of[gid]
            if gid in group_weights and fallback is None:
                out[position] = group_weights[gid].get(row.trajectory_id, 1.0)
            elif gid in group_weights:
                outcomes[position], reasons[position] = Outcome.GUARD, f"guard: {fallback}"
            else:
                reasons[position] = group_reasons[gid]
        metrics = step_metrics(
            outcome_of, results, group_weights, latencies, waited, share, agreement, checks, fallback
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

    def discard_pending(self) -> int:
        """Forget every submission not yet collected (groups the trainer dropped, e.g. by a filter).

        Queued gradings are cancelled, running ones are cut off (their slots freed, their results dropped);
        their rows may be submitted again.

        Returns:
            how many groups were discarded.
        """
        with self._lock:
            pending: dict[int, tuple[_Submission, set[str]]] = {}
            for (gid, _), submission in self._owner.items():
                pending.setdefault(id(submission), (submission, set()))[1].add(gid)
            self._owner.clear()
        for submission, group_ids in pending.values():
            self._abandon(submission, sorted(group_ids))
        return sum(len(group_ids) for _, group_ids in pending.values())

    def close(self, timeout: float | None = CLOSE_WAIT) -> None:
        """Stop grading: queued gradings are cancelled, running ones get at most `timeout` seconds to end.

        Returns within `timeout` (plus a few milliseconds) whatever the graders do: a grading still running
        then is left behind on its daemon thread, its result dropped. Rows still pending stay collectable
        (their unfinished groups are late). The Ray grader is left to its owner. Calling it again is harmless.

        Args:
            timeout: seconds to wait for running gradings (default `CLOSE_WAIT`; None or `math.inf`: until
                they end; a negative one: no wait).
        Raises:
            ValueError, TypeError: the timeout is NaN, or not a number; the grader is left open.
        """
        limit = checked_seconds(timeout, "timeout")
        running = self._workers.close()
        if running:
            wait_futures(running, timeout=wait_seconds(limit))


def _is_mixed(group: Group) -> bool:
    return is_mixed_group([bool(t.passed) for t in group.trajectories])


def _skip_outcome(group: Group) -> Outcome:
    # A group never submitted is not mixed: none of it passed, or all of it did.
    if not any(bool(t.passed) for t in group.trajectories):
        return Outcome.NO_PASSING
    return Outcome.ALL_PASSED


def _outcome_of(result: GroupResult) -> Outcome:
    if result.outcome is not None:
        return result.outcome
    # A result written without a code (older pickles, a hand-made result): its status says enough.
    return Outcome.GRADED if result.status == "graded" else Outcome.INTERNAL_ERROR


def _resolve(future: Future[GroupResult], result: GroupResult) -> None:
    # The trainer may have stopped waiting (the future cancelled) just before the result came.
    with contextlib.suppress(InvalidStateError):
        if not future.done():
            future.set_result(result)


def _settle(
    submission: _Submission, group_id: str
) -> tuple[GroupResult | None, GroupResult | None, float | None]:
    """(result or None when late, self-check result or None, latency) of a group, as things stand now."""

    def outcome(future: Future[GroupResult] | None) -> GroupResult | None:
        if future is None or not future.done() or future.cancelled():
            return None
        try:
            return future.result()
        except BaseException:  # noqa: BLE001 - cannot happen (the job catches all); never the trainer's
            return None

    result = outcome(submission.futures.get(group_id))
    done = submission.done_at.get(group_id)
    latency = None if result is None or done is None else done - submission.submitted
    return result, outcome(submission.checks.get(group_id)), latency
