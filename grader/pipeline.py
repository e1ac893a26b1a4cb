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
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from grader.errors import BaseCommitMissing, GradingFailed, InvalidRanking, WorkspaceError
from grader.graders.base import Grade, Grader
from grader.groups.formats import LoadFailure
from grader.groups.models import Group, GroupResult, TrajectoryReport
from grader.groups.outcomes import Outcome, RedistributionOutcome
from grader.groups.sampling import skip_reason
from grader.ranking import length
from grader.ranking.order import validate_ranking
from grader.redistribution import redistribute
from grader.util.atomic import write_lines_atomic
from grader.util.concurrency import Concurrency, default_resources
from grader.workspace import patches
from grader.workspace.gitcmd import GitError
from grader.workspace.mirrors import MirrorCache, base_missing_reason, is_url, shared_cache
from grader.workspace.view import WorkspaceView
from grader.workspace.workspace import DEFAULT_MAX_FUZZ, Workspace, open_workspace


@dataclass
class GradingOptions:
    """How groups are graded and credit redistributed. The defaults are what `gagar grade` uses; the fields
    with a command-line name are the options of every command that grades (see `grader.cli.options`)."""

    grade_all_pass: bool = False
    """Also grade groups where every trajectory passed (a standalone patch set)."""
    scheme: str = field(
        default=redistribute.DEFAULT_SCHEME, metadata={"choices": redistribute.WEIGHT_SCHEMES}
    )
    """Weight scheme that turns rank positions into weights."""
    floor: float = redistribute.DEFAULT_FLOOR
    """Lowest weight, in (0, 1]."""
    decay: float = field(default=0.5, metadata={"scheme": "exponential"})
    """Per-rank factor of the exponential scheme."""
    top_k: int = field(default=1, metadata={"scheme": "top-k", "param": "k"})
    """Ranks kept at full weight by the top-k scheme."""
    preserve: redistribute.Preserve = "sequence"
    """What stays constant over the passing trajectories: the advantage sum (sequence), the token-weighted
    sum (token, for token-mean losses; needs response_length), or nothing (none, an ablation)."""
    max_patch_bytes: int = patches.DEFAULT_MAX_PATCH_BYTES
    """Largest patch accepted, in bytes."""
    max_fuzz: int = DEFAULT_MAX_FUZZ
    """Most fuzz the apply chain may use (0 to 2)."""
    scheme_params: dict[str, float] | None = field(default=None, metadata={"cli": None})
    """The scheme's parameters as given to `rank_to_weights`; overrides floor, decay and top_k when set."""
    mirrors: MirrorCache | None = field(default=None, metadata={"cli": None})
    """Where repositories are mirrored (default: the shared cache)."""
    workspace_root: Path | None = field(default=None, metadata={"cli": None})
    """Where a workspace is built (default: a new temporary directory per group)."""
    keep_workspaces: bool = field(default=False, metadata={"cli": None})
    """Keep workspaces after grading, for inspection."""
    concurrency: Concurrency | None = field(default=None, metadata={"cli": None})
    """The resources object every grading shares (default: the process's own, `default_resources()`)."""

    def weight_params(self) -> dict[str, float]:
        """The parameters `rank_to_weights` gets for `scheme`."""
        if self.scheme_params is not None:
            return dict(self.scheme_params)
        params: dict[str, float] = {"floor": self.floor}
        for f in fields(self):
            if f.metadata.get("scheme") == self.scheme:
                params[f.metadata.get("param", f.name)] = getattr(self, f.name)
        return params

    @property
    def resources(self) -> Concurrency:
        return self.concurrency or default_resources()


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _unencodable_patches(group: Group) -> dict[str, str]:
    """The trajectories whose patch cannot become the bytes git reads, each with the reason.

    A patch is text whose undecodable bytes are lone surrogates U+DC80..U+DCFF (Python's surrogateescape);
    any other lone surrogate (valid JSON: "\\ud800") stands for no byte at all. Such a trajectory is marked
    and left out of its group's workspace; the group and the batch go on.

    Args:
        group: the group.

    Returns:
        Trajectory id -> the reason, naming the group, the trajectory and the character.
    """
    found = {}
    for t in group.trajectories:
        try:
            t.patch.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            found[t.id] = (
                f"group {group.group_id!r}: trajectory {t.id!r}: patch cannot be encoded: lone surrogate "
                f"U+{ord(t.patch[exc.start]):04X} at character {exc.start} (neither text nor an escaped byte)"
            )
    return found


def _reports(group: Group, unencodable: dict[str, str]) -> dict[str, TrajectoryReport]:
    reports = {}
    for t in group.trajectories:
        report = TrajectoryReport(passed=bool(t.passed), error=unencodable.get(t.id))
        if report.error is None:
            try:
                report.stats = patches.stats(patches.validate(t.patch))
            except patches.PatchError as exc:
                report.error = f"invalid patch: {exc}"
        reports[t.id] = report
    return reports


def passthrough(item: Group | LoadFailure, grader_name: str, reason: str, outcome: Outcome) -> GroupResult:
    """A result that leaves every advantage as it was, with the reason (for groups not graded)."""
    if isinstance(item, LoadFailure):
        return GroupResult(
            group_id=item.group_id, status=outcome.status, reason=reason, outcome=outcome, grader=grader_name
        )
    before = {t.id: _finite_or_none(t.advantage) for t in item.trajectories}
    return GroupResult(
        group_id=item.group_id,
        status=outcome.status,
        reason=reason,
        outcome=outcome,
        grader=grader_name,
        advantages_before=before,
        advantages_after=dict(before),
    )


def grade_group_sync(
    item: Group | LoadFailure, grader: Grader, options: GradingOptions | None = None
) -> GroupResult:
    """Grade one group (or report why a file entry is not a group).

    Never raises for a group's own problems, nor for a grader's: every failure becomes a `failed` result
    with its advantages unchanged, its `outcome` and the reason.
    """
    options = options or GradingOptions()
    start = time.perf_counter()
    if isinstance(item, LoadFailure):
        reason = f"invalid group ({item.source}): {item.reason}"
        return passthrough(item, grader.name, reason, Outcome.INVALID_GROUP)
    group = item
    unencodable = _unencodable_patches(group)
    skip = skip_reason(group, grade_all_pass=options.grade_all_pass)
    if skip is not None:
        skip = _check_base_of_skipped(group, skip, options.mirrors or shared_cache())
        result = passthrough(group, grader.name, skip[1], skip[0])
        result.trajectories = _reports(group, unencodable)
        result.seconds = round(time.perf_counter() - start, 4)
        return result
    result = passthrough(group, grader.name, "", Outcome.GRADED)
    # The workspace never sees a patch that cannot be encoded: that trajectory alone is left out, marked.
    built = group.model_copy(
        update={"trajectories": [t for t in group.trajectories if t.id not in unencodable]}
    )
    try:
        with open_workspace(
            built,
            root=options.workspace_root,
            keep=options.keep_workspaces,
            mirrors=options.mirrors,
            max_patch_bytes=options.max_patch_bytes,
            max_fuzz=options.max_fuzz,
            resources=options.resources,
        ) as workspace:
            _grade_in(workspace, group, grader, options, result, unencodable)
    except BaseCommitMissing as exc:
        _fail(result, Outcome.BASE_MISSING, str(exc))
    except WorkspaceError as exc:
        _fail(result, Outcome.WORKSPACE, str(exc))
    except Exception as exc:  # grading never crashes a training loop: any surprise fails this group only
        _fail(result, Outcome.INTERNAL_ERROR, f"group {group.group_id!r}: {type(exc).__name__}: {exc}")
    if result.status == "failed":
        result.advantages_after = dict(result.advantages_before)
        result.ranking, result.weights = [], {}
    else:
        result.length = length.group_signal(group, result)
    result.seconds = round(time.perf_counter() - start, 4)
    return result


def _check_base_of_skipped(
    group: Group, skip: tuple[Outcome, str], mirrors: MirrorCache
) -> tuple[Outcome, str]:
    """A skipped group's base commit, checked in its local repository as a graded group's would be.

    A missing base is a broken group whatever sampling thinks of it, so it fails as a graded group would, with
    the same reason. The answer comes from the repository itself, never from which mirrors happen to exist,
    so it does not depend on the batch's order, earlier runs or the process. A URL is not fetched for a
    group sampling skips: the skip stands, saying that the base was not checked.
    """
    repo, commit = group.task.repo, group.task.base_commit
    if is_url(repo):
        return skip[
            0
        ], f"{skip[1]} (base commit not checked: {repo!r} is a URL, fetched for graded groups only)"
    try:
        found = mirrors.local_has_commit(repo, commit)
    except (FileNotFoundError, GitError) as exc:
        return Outcome.WORKSPACE, f"group {group.group_id!r}: {exc}"
    if not found:
        return Outcome.BASE_MISSING, f"group {group.group_id!r}: {base_missing_reason(repo, commit)}"
    return skip


def _fail(result: GroupResult, outcome: Outcome, reason: str) -> None:
    result.status, result.outcome, result.reason = outcome.status, outcome, reason


def _grade_in(
    workspace: Workspace,
    group: Group,
    grader: Grader,
    options: GradingOptions,
    result: GroupResult,
    unencodable: dict[str, str],
) -> None:
    for c in workspace.candidates.values():
        result.trajectories[c.trajectory_id] = TrajectoryReport(
            passed=c.passed,
            branch=c.ref if c.commit else None,
            apply_method=c.apply_method,
            tolerated=list(c.tolerated),
            error=c.error,
            patch_class=c.patch_class,
            stats=c.stats,
        )
    for t in group.trajectories:
        if t.id in unencodable:
            result.trajectories[t.id] = TrajectoryReport(passed=bool(t.passed), error=unencodable[t.id])
    gradable = workspace.gradable()
    if not gradable:
        passing = [(tid, r.error) for tid, r in result.trajectories.items() if r.passed]
        problems = "; ".join(f"{tid}: {error}" for tid, error in passing)
        _fail(result, Outcome.NO_GRADABLE, f"no passing trajectory has a patch that applies: {problems}")
        return
    try:
        grade = grader.grade(WorkspaceView(workspace, options.resources))
        ranking = validate_ranking(grade.ranking, gradable)
    except InvalidRanking as exc:
        _fail(result, Outcome.INVALID_RANKING, f"invalid ranking from {grader.name}: {exc}")
        return
    except GradingFailed as exc:
        _fail(result, Outcome.GRADER_FAILED, f"{grader.name} grader failed: {exc}")
        result.usage, result.transcript, result.flags = dict(exc.usage), exc.transcript, dict(exc.flags)
        result.details = dict(exc.details)
        return
    _record(result, grade)
    result.status, result.outcome, result.ranking = "graded", Outcome.GRADED, ranking
    skipped = [c.trajectory_id for c in workspace.candidates.values() if c.passed and not c.commit]
    skipped += [t.id for t in group.trajectories if t.passed and t.id in unencodable]
    result.reason = f"{len(skipped)} passing trajectories left out: {', '.join(skipped)}" if skipped else ""

    weights = redistribute.rank_to_weights(ranking, options.scheme, **options.weight_params())
    if grade.certainty is not None:  # an unsure grader (a consensus that disagreed) moves less credit
        weights = redistribute.shrink_weights(weights, grade.certainty)
    result.weights = weights
    included = [t for t in group.trajectories if t.id in weights or not t.passed]
    advantages = np.array([t.advantage for t in included], dtype=np.float64)
    passed = np.array([t.id in weights for t in included])
    w = np.array([weights.get(t.id, 1.0) for t in included])
    lengths = None
    if options.preserve == "token":
        if any(t.response_length is None for t in included if t.passed):
            _redistributed(result, RedistributionOutcome.NEEDS_LENGTHS)
            return
        lengths = np.array([float(t.response_length or 0) for t in included])
    outcome = redistribute.redistribute_group(
        advantages, passed, w, lengths=lengths, preserve=options.preserve
    )
    _redistributed(result, outcome.outcome)
    for t, value in zip(included, outcome.advantages.tolist(), strict=True):
        result.advantages_after[t.id] = value


def _redistributed(result: GroupResult, outcome: RedistributionOutcome) -> None:
    result.redistribution_outcome, result.redistribution = outcome, outcome.describe()


def _record(result: GroupResult, grade: Grade) -> None:
    result.usage, result.transcript, result.flags = dict(grade.usage), grade.transcript, dict(grade.flags)
    result.details = dict(grade.details)
    if grade.certainty is not None:
        result.certainty = grade.certainty
        result.details["weight_shrink"] = grade.certainty  # where readers of 0.1 results look for it
    for trajectory_id, report in result.trajectories.items():
        report.signals = grade.signals.get(trajectory_id, {})
        report.rationale = grade.rationales.get(trajectory_id)


def grade_indexed(
    items: Iterable[Group | LoadFailure],
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
        # In a worker thread even a BaseException from the grader (SystemExit, say) fails its group only;
        # Ctrl-C still reaches the main thread, waiting here.
        futures = {
            pool.submit(grade_group_contained, item, grader, options): i for i, item in enumerate(items)
        }
        for future in as_completed(futures):
            yield futures[future], future.result()


def grade_groups(
    items: Iterable[Group | LoadFailure],
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
    item: Group | LoadFailure, grader: Grader, options: GradingOptions | None = None
) -> GroupResult:
    """`grade_group_sync` for asyncio code: runs in a worker thread, never blocks the event loop."""
    return await asyncio.to_thread(grade_group_sync, item, grader, options)


def grade_group_contained(
    item: Group | LoadFailure, grader: Grader, options: GradingOptions | None = None
) -> GroupResult:
    """`grade_group_sync` for a worker that must hand back a result whatever happens (a trainer's thread,
    a Ray actor): anything the grader raises fails this group only, BaseExceptions included (`SystemExit`,
    a `CancelledError`, a `KeyboardInterrupt` raised by code: Ctrl-C reaches only the main thread).

    Args:
        item: the group (or the file entry that is not one).
        grader: the grader.
        options: grading options.

    Returns:
        The result; a group whose grading raised is `failed` (outcome `internal_error`) with the exception
        named, its advantages unchanged.
    """
    try:
        return grade_group_sync(item, grader, options)
    except BaseException as exc:  # noqa: BLE001 - the point: nothing a grader raises leaves its group
        reason = f"group {item.group_id!r}: {type(exc).__name__}: {exc}"
        return passthrough(item, grader.name, reason, Outcome.INTERNAL_ERROR)


def write_results(results: Iterable[GroupResult], out_dir: Path | str) -> Path:
    """Write results as `out_dir/results.jsonl` (one line per group), returning the path.

    The file is replaced atomically (`grader.util.atomic`): an interrupted write leaves the previous one.
    Raises OSError when the folder cannot be made or the file written, ValueError for a non-finite number.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.jsonl"
    # Replaced whole: a rerun that fails partway (a full disk) leaves the previous complete file.
    write_lines_atomic(path, (json.dumps(r.model_dump(mode="json"), allow_nan=False) for r in results))
    return path
