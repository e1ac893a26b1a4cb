"""One group from file to result: sampling, workspace, grader, validated ranking, redistribution.

Every failure here becomes a result, never an exception: a group that cannot be graded passes through with
its advantages unchanged and the reason recorded, so a batch (or a training step) always completes.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grader import patches, redistribute
from grader.cache import GradeCache, group_key
from grader.concurrency import Concurrency
from grader.formats import LoadError
from grader.graders.base import Grader, GradingFailed
from grader.mirrors import MirrorCache
from grader.models import Group, GroupResult, Status, TrajectoryReport
from grader.ranking import InvalidRanking, validate_ranking
from grader.sampling import skip_reason
from grader.workspace import DEFAULT_MAX_FUZZ, WorkspaceError, open_workspace


@dataclass
class GradingOptions:
    """How groups are graded and credit redistributed. The defaults are what `gagar grade` uses."""

    grade_all_pass: bool = False
    scheme: str = redistribute.DEFAULT_SCHEME
    scheme_params: dict[str, float] = field(default_factory=lambda: {"floor": redistribute.DEFAULT_FLOOR})
    preserve: str = "sequence"
    max_patch_bytes: int = patches.DEFAULT_MAX_PATCH_BYTES
    max_fuzz: int = DEFAULT_MAX_FUZZ
    mirrors: MirrorCache | None = None
    workspace_root: Path | None = None
    keep_workspaces: bool = False
    concurrency: Concurrency | None = None
    cache: GradeCache | None = None


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _reports(group: Group) -> dict[str, TrajectoryReport]:
    reports = {}
    for t in group.trajectories:
        report = TrajectoryReport(passed=bool(t.passed))
        try:
            report.stats = patches.stats(patches.validate(t.patch))
        except patches.PatchError as exc:
            report.error = f"invalid patch: {exc}"
        reports[t.id] = report
    return reports


def passthrough(
    item: Group | LoadError, grader_name: str, reason: str, status: Status = "failed"
) -> GroupResult:
    """A result that leaves every advantage as it was, with the reason (for groups not graded)."""
    if isinstance(item, LoadError):
        return GroupResult(group_id=item.group_id, status=status, reason=reason, grader=grader_name)
    before = {t.id: _finite_or_none(t.advantage) for t in item.trajectories}
    return GroupResult(
        group_id=item.group_id,
        status=status,
        reason=reason,
        grader=grader_name,
        advantages_before=before,
        advantages_after=dict(before),
    )


def grade_group_sync(
    item: Group | LoadError, grader: Grader, options: GradingOptions | None = None
) -> GroupResult:
    """Grade one group (or report why a file entry is not a group). Never raises for bad input."""
    options = options or GradingOptions()
    start = time.perf_counter()
    if isinstance(item, LoadError):
        return passthrough(item, grader.name, f"invalid group ({item.source}): {item.reason}")
    group = item
    result = passthrough(group, grader.name, "", status="skipped")
    reason = skip_reason(group, grade_all_pass=options.grade_all_pass)
    if reason is not None:
        result.reason = reason
        result.trajectories = _reports(group)
        result.seconds = round(time.perf_counter() - start, 4)
        return result
    try:
        with open_workspace(
            group,
            root=options.workspace_root,
            keep=options.keep_workspaces,
            mirrors=options.mirrors,
            max_patch_bytes=options.max_patch_bytes,
            max_fuzz=options.max_fuzz,
            build_slots=options.concurrency.workspace if options.concurrency else None,
        ) as workspace:
            _grade_in(workspace, group, grader, options, result)
    except WorkspaceError as exc:
        result.status, result.reason = "failed", str(exc)
    except Exception as exc:  # grading never crashes a training loop: any surprise fails this group only
        result.status, result.reason = "failed", f"group {group.group_id!r}: {type(exc).__name__}: {exc}"
    if result.status == "failed":
        result.advantages_after = dict(result.advantages_before)
        result.ranking, result.weights = [], {}
    result.seconds = round(time.perf_counter() - start, 4)
    return result


def _grade_in(workspace, group: Group, grader: Grader, options: GradingOptions, result: GroupResult) -> None:
    for c in workspace.candidates.values():
        result.trajectories[c.trajectory_id] = TrajectoryReport(
            passed=c.passed,
            branch=c.ref if c.commit else None,
            apply_method=c.apply_method,
            error=c.error,
            patch_class=c.patch_class,
            stats=c.stats,
        )
    gradable = workspace.gradable()
    if not gradable:
        result.status = "failed"
        result.reason = "no passing trajectory has a patch that applies: " + "; ".join(
            f"{c.trajectory_id}: {c.error}" for c in workspace.candidates.values() if c.passed
        )
        return
    key = group_key(group, grader, gradable) if options.cache is not None else ""
    cached = options.cache.get(key, group, gradable) if options.cache is not None else None
    try:
        grade = cached if cached is not None else grader.grade(workspace)
        ranking = validate_ranking(grade.ranking, gradable)
    except InvalidRanking as exc:
        result.status, result.reason = "failed", f"invalid ranking from {grader.name}: {exc}"
        return
    except GradingFailed as exc:
        result.status, result.reason = "failed", f"{grader.name} grader failed: {exc}"
        _record_details(result, exc.details)
        return
    if options.cache is not None and cached is None:
        options.cache.put(key, group, grade)
    _record_details(result, grade.details)
    for trajectory_id, report in result.trajectories.items():
        report.signals = grade.signals.get(trajectory_id, {})
        report.rationale = grade.rationales.get(trajectory_id)
    result.status, result.ranking = "graded", ranking
    skipped = [c.trajectory_id for c in workspace.candidates.values() if c.passed and not c.commit]
    result.reason = f"{len(skipped)} passing trajectories left out: {', '.join(skipped)}" if skipped else ""

    weights = redistribute.rank_to_weights(ranking, options.scheme, **options.scheme_params)
    shrink = grade.details.get("weight_shrink")
    if shrink is not None:  # a grader unsure of itself (a consensus that disagreed) moves less credit
        weights = redistribute.shrink_weights(weights, float(shrink))
    result.weights = weights
    included = [t for t in group.trajectories if t.id in weights or not t.passed]
    advantages = np.array([t.advantage for t in included], dtype=np.float64)
    passed = np.array([t.id in weights for t in included])
    w = np.array([weights.get(t.id, 1.0) for t in included])
    lengths = None
    if options.preserve == "token":
        if any(t.response_length is None for t in included if t.passed):
            result.redistribution = (
                "identity: preserve='token' needs response_length on every graded trajectory"
            )
            return
        lengths = np.array([float(t.response_length or 0) for t in included])
    outcome = redistribute.redistribute_group(
        advantages, passed, w, lengths=lengths, preserve=options.preserve
    )
    result.redistribution = "applied" if outcome.applied else f"identity: {outcome.reason}"
    for t, value in zip(included, outcome.advantages.tolist(), strict=True):
        result.advantages_after[t.id] = value


def _record_details(result: GroupResult, details: dict[str, Any]) -> None:
    details = dict(details)
    result.usage = details.pop("usage", {}) or {}
    result.transcript = details.pop("transcript", None)
    result.flags = {tid: list(hits) for tid, hits in (details.pop("flags", {}) or {}).items()}
    result.details = details


def grade_indexed(
    items: Iterable[Group | LoadError],
    grader: Grader,
    options: GradingOptions | None = None,
    workers: int = 1,
) -> Iterator[tuple[int, GroupResult]]:
    """(input position, result) for each item, in completion order, with up to `workers` groups at once.

    Workspace builds, LLM calls and sandboxes are bounded separately by `options.concurrency`. The grader
    must be thread-safe when `workers` > 1 (the built-in ones are).
    """
    options = options or GradingOptions()
    if workers <= 1:
        for index, item in enumerate(items):
            yield index, grade_group_sync(item, grader, options)
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gagar-grade") as pool:
        futures = {pool.submit(grade_group_sync, item, grader, options): i for i, item in enumerate(items)}
        for future in as_completed(futures):
            yield futures[future], future.result()  # grade_group_sync never raises for a group's own problems


def grade_groups(
    items: Iterable[Group | LoadError],
    grader: Grader,
    options: GradingOptions | None = None,
    workers: int = 1,
    on_result: Callable[[GroupResult], Any] | None = None,
) -> list[GroupResult]:
    """Grade every item, up to `workers` at once, and return the results in input order.

    `on_result` is called with each result as soon as it is ready (completion order), e.g. to stream them.
    """
    results: dict[int, GroupResult] = {}
    for index, result in grade_indexed(items, grader, options, workers):
        results[index] = result
        if on_result is not None:
            on_result(result)
    return [results[i] for i in sorted(results)]


async def grade_group(
    item: Group | LoadError, grader: Grader, options: GradingOptions | None = None
) -> GroupResult:
    """`grade_group_sync` for asyncio code: runs in a worker thread, never blocks the event loop."""
    return await asyncio.to_thread(grade_group_sync, item, grader, options)


def write_results(results: Iterable[GroupResult], out_dir: Path | str) -> Path:
    """Write results as `out_dir/results.jsonl` (one line per group), returning the path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.jsonl"
    with open(path, "w", encoding="utf-8") as handle:
        for result in results:
            handle.write(json.dumps(result.model_dump(mode="json"), allow_nan=False) + "\n")
            handle.flush()
    return path
