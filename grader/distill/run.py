"""`gagar distill`: grade groups whose right order is known with a teacher model, keep what agrees.

Each group is graded K times by the LLM grader (the teacher), each time under labels and an order derived
from the run's secret and (group, sample), with data markers derived from (group, sample, call): what a
grading shows the model is reproducible from the run. Each sample's outcome is written at once to
`DIR/records/<group>/<sample>.json` (atomically, never twice), so a run killed at any point continues where
it was. When every sample is recorded, the outputs are assembled from the records alone, in a fixed order:
`sft.jsonl` and `sft_eval.jsonl` (train/eval split by task), optionally the OpenAI format, and
`manifest.json`. A resumed run therefore writes exactly the files an uninterrupted one does. Timings are
left out of records and outputs (they are all a rerun would change).

This module grades (`grade_sample`, `run_pending`) and runs the whole (`distill`); the run folder's files
are `grader.distill.records`, the plan and settings `grader.distill.plan`, the outputs
`grader.distill.assemble`. Every name those had here is still importable from this module.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

from grader.distill import sft
from grader.distill.assemble import assemble
from grader.distill.benchmarks import Benchmarks
from grader.distill.plan import DistillConfig, Plan, plan
from grader.distill.records import (
    check_resume,
    move_aside,
    prepare_out,
    read_record,
    read_secret,
    record_path,
    record_problem,
    run_lock,
)
from grader.errors import GradingFailed, InvalidRanking, WorkspaceError
from grader.graders.llm.agent import LLMGrader
from grader.graders.llm.tools import offered_tools, tool_schemas
from grader.graders.transcript import read_transcript
from grader.groups.models import Group
from grader.ranking.order import validate_ranking
from grader.ranking.references import Reference, load_references, reference_credit
from grader.util.atomic import remove_leftover_temporaries, write_text_atomic
from grader.util.concurrency import Concurrency, default_resources
from grader.workspace.workspace import Workspace, open_workspace, ref_name

__all__ = [
    "DistillConfig",
    "Plan",
    "assemble",
    "check_resume",
    "distill",
    "grade_sample",
    "move_aside",
    "plan",
    "prepare_out",
    "read_record",
    "read_secret",
    "record_path",
    "record_problem",
    "reproducible_events",
    "run_header",
    "run_pending",
]

log = logging.getLogger(__name__)

TIMING_KEYS = ("t", "seconds", "sleep")  # what a rerun changes: left out of records
FORMAT = 1


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _Workspaces:
    """One workspace per group, opened on first use and closed when its last pending sample is done. A
    workspace's git object reader serves one grading at a time, so its group's lock is held while grading."""

    def __init__(self, pending: list[tuple[Group, int]], resources: Concurrency) -> None:
        self._left: dict[str, int] = {}
        for group, _ in pending:
            self._left[group.group_id] = self._left.get(group.group_id, 0) + 1
        self._open: dict[str, tuple[Any, Workspace | WorkspaceError]] = {}
        self._locks = {gid: threading.Lock() for gid in self._left}
        self.grading = {gid: threading.Lock() for gid in self._left}
        self._resources = resources

    def get(self, group: Group) -> Workspace:
        with self._locks[group.group_id]:
            if group.group_id not in self._open:
                context = open_workspace(group, resources=self._resources)
                try:
                    self._open[group.group_id] = (context, context.__enter__())
                except WorkspaceError as exc:
                    self._open[group.group_id] = (None, exc)
            found = self._open[group.group_id][1]
        if isinstance(found, WorkspaceError):
            raise found
        return found

    def done(self, group: Group) -> None:
        with self._locks[group.group_id]:
            self._left[group.group_id] -= 1
            if self._left[group.group_id] == 0 and group.group_id in self._open:
                context, _ = self._open.pop(group.group_id)
                if context is not None:
                    context.__exit__(None, None, None)


def reproducible_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A transcript's events without what a rerun changes: timings left out, and the tool-call ids (which
    servers draw at random) renumbered call_1, call_2, ... in order of appearance.

    Args:
        events: the transcript's events.

    Returns:
        New events.
    """
    ids: dict[str, str] = {}

    def renumber(value: str) -> str:
        return ids.setdefault(value, f"call_{len(ids) + 1}")

    cleaned = []
    for event in events:
        event = {key: value for key, value in event.items() if key not in TIMING_KEYS}
        if "call_id" in event:
            event["call_id"] = renumber(event["call_id"])
        if event.get("tool_calls"):
            event["tool_calls"] = [{**call, "id": renumber(call["id"])} for call in event["tool_calls"]]
        cleaned.append(event)
    return cleaned


def _category(reason: str) -> str:
    return "budget" if "budget exhausted" in reason else "failure"


def grade_sample(
    group: Group,
    sample: int,
    workspace: Workspace,
    teacher: dict[str, Any],
    secret: str,
    reference: Reference,
    min_agreement: float,
    scratch: Path,
) -> dict[str, Any]:
    """One teacher grading of one group, scored: the record written for (group, sample).

    Args:
        group: the group.
        sample: which grading of it (its labels and markers derive from the secret, the group and this).
        workspace: the group's workspace.
        teacher: the LLM grader's options (model, base_url, budgets, sandbox, ...).
        secret: the run's secret.
        reference: the group's reference.
        min_agreement: the agreement a transcript needs to be kept.
        scratch: a folder for the grading's transcript while it runs.

    Returns:
        The record: status kept or dropped, the category (kept, agreement, budget, failure), the reason,
        credit, pairs, agreement, ranking, usage, labels (label -> ids), the labels in the order shown,
        contrast labels, the conversation (when kept) and the transcript's events without timings.
        Whatever the teacher does (fails, times out, submits nonsense) ends in a record; an exception out of
        here is a bug in gagar: the run stops without recording the sample, so a rerun grades it again.
    """
    grader = LLMGrader(**teacher, seed=sample, secret=secret, transcript_dir=scratch, tool_mode="native")
    record: dict[str, Any] = {"group_id": group.group_id, "sample": sample}
    view = workspace.view()
    try:
        grade = grader.grade(view)
        ranking = validate_ranking(grade.ranking, view.gradable())
        details, usage, transcript = grade.details, grade.usage, grade.transcript
        failure = None
    except (GradingFailed, InvalidRanking) as exc:
        details = dict(getattr(exc, "details", {}) or {})
        usage = dict(getattr(exc, "usage", {}) or {})
        transcript, ranking, failure = getattr(exc, "transcript", None), [], str(exc)
    events = reproducible_events(read_transcript(transcript)) if transcript else []
    record.update(
        seed=details.get("seed"),
        labels=details.get("labels", {}),
        shown=details.get("shown", []),
        contrast=list(details.get("contrast", {}).items()),  # pairs, in the order shown
        usage=usage,
        ranking=ranking,
    )
    if failure is not None:
        record.update(status="dropped", category=_category(failure), reason=failure, events=events)
        return record
    credit, pairs = reference_credit(ranking, reference)
    value = credit / pairs if pairs else None
    record.update(credit=credit, pairs=pairs, agreement=value, events=events)
    try:
        record["messages"] = sft.messages_from_events(events)
    except sft.NotAnExample as exc:
        record.update(status="dropped", category="failure", reason=str(exc))
        return record
    if value is None:
        record.update(status="dropped", category="agreement", reason="no reference pair among the ranked")
    elif value < min_agreement:
        record.update(
            status="dropped", category="agreement", reason=f"agreement {value:.3f} < {min_agreement:g}"
        )
    else:
        record.update(status="kept", category="kept", reason=f"agreement {value:.3f} >= {min_agreement:g}")
    return record


def run_pending(
    work: Plan,
    teacher: dict[str, Any],
    secret: str,
    config: DistillConfig,
    out: Path,
    resources: Concurrency | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, str]:
    """Grade every pending (group, sample), writing each record as it finishes.

    Args:
        work: the plan.
        teacher: the LLM grader's options.
        secret: the run's secret.
        config: the run's settings.
        out: the output folder.
        resources: the bounds on LLM calls, sandboxes and builds (the process default when None).
        on_record: called with each record once written (the CLI's progress bar).

    Returns:
        Group id -> why its workspace could not be built (those groups record nothing: a later run retries).
    """
    resources = resources or default_resources()
    workspaces = _Workspaces(work.pending, resources)
    scratch_root = out / "scratch"
    failed: dict[str, str] = {}

    def one(group: Group, sample: int) -> None:
        scratch = scratch_root / ref_name(group.group_id) / str(sample)
        shutil.rmtree(scratch, ignore_errors=True)  # what a killed run left
        try:
            workspace = workspaces.get(group)
        except WorkspaceError as exc:
            failed[group.group_id] = str(exc)
            workspaces.done(group)
            return  # the group fails as a whole; nothing recorded, so a later run tries again
        try:
            with workspaces.grading[group.group_id]:
                record = grade_sample(
                    group,
                    sample,
                    workspace,
                    teacher,
                    secret,
                    work.references[group.group_id],
                    config.min_agreement,
                    scratch,
                )
            path = record_path(out, group.group_id, sample)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(record, sort_keys=True) + "\n")
        finally:
            workspaces.done(group)
            shutil.rmtree(scratch, ignore_errors=True)
        if on_record is not None:
            on_record(record)

    with ThreadPoolExecutor(max_workers=config.workers) as pool:
        for future in [pool.submit(one, group, sample) for group, sample in work.pending]:
            future.result()
    shutil.rmtree(scratch_root, ignore_errors=True)
    return failed


def run_header(
    teacher: dict[str, Any], config: DistillConfig, reference: Path, benchmarks: Benchmarks
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The manifest's fixed part: teacher, fingerprints of prompts and tool schemas, settings.

    Args:
        teacher: the LLM grader's options.
        config: the run's settings.
        reference: the reference file.
        benchmarks: the benchmarks consulted.

    Returns:
        (header, tool schemas the trained grader will be served with).
    """
    grader = LLMGrader(**teacher, tool_mode="native")
    prompts = grader.prompts
    where = LLMGrader(**{**teacher, "base_url": None}, tool_mode="native")  # the teacher, wherever served
    tools = tool_schemas(offered_tools(prompts.tools, run=grader.config.sandbox is not None))
    settings = {k: v for k, v in asdict(config).items() if k != "workers"}
    header = {
        "format": FORMAT,
        "teacher": {
            "model": grader.config.model,
            "base_url": grader.config.base_url,
            "fingerprint": _sha(where.fingerprint()),
        },
        "fingerprints": {
            "prompts": _sha(json.dumps([prompts.system, prompts.task], sort_keys=True)),
            "tools": _sha(json.dumps(tools, sort_keys=True)),
            "reference": hashlib.sha256(reference.read_bytes()).hexdigest()[:16],
        },
        "settings": settings,
        "benchmarks": [str(folder) for folder in benchmarks.folders],
        "files": {"train": "sft.jsonl", "eval": "sft_eval.jsonl", "records": "records/"},
    }
    return header, tools


def distill(
    inputs: list[Path],
    reference: Path,
    teacher: dict[str, Any],
    out: Path,
    config: DistillConfig | None = None,
    benchmarks: Benchmarks | None = None,
    resources: Concurrency | None = None,
    on_plan: Callable[[Plan], None] | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    notify: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Distil a teacher: grade, score, keep, and write the SFT data and its manifest (resumable).

    Args:
        inputs: group files.
        reference: the reference file, any kind `grader.ranking.references.load_references` reads (pairwise,
            ranking, degrade, consensus).
        teacher: the LLM grader's options (`LLMConfig` fields: model, base_url, budgets, sandbox, ...).
        out: the output folder.
        config: samples, threshold, augmentation, split, formats, workers.
        benchmarks: groups refused as training input (default: none).
        resources: bounds on LLM calls, sandboxes and builds (the process default when None).
        on_plan: called once with the plan, before any teacher call.
        on_record: called with each record as it is written.
        notify: told of each damaged file found (a record, `run.json`, the secret): each is named, moved
            aside to `NAME.damaged-<time>` and made again (default: a log warning).

    Returns:
        The manifest.

    Raises:
        DistillError: the output folder cannot be written, or holds a run with other settings.
        InputFileError, InvalidReference: the reference file cannot be read or is not a valid reference.
    """
    config = config or DistillConfig()
    benchmarks = benchmarks or Benchmarks()
    notify = notify or log.warning
    secret = prepare_out(out, notify)
    references = load_references(reference)
    header, tools = run_header(teacher, config, reference, benchmarks)
    with run_lock(out):
        # A killed run can leave a half-written record's temporary; nothing reads it, but the folder should
        # hold what an uninterrupted run leaves.
        remove_leftover_temporaries(out)
        check_resume(out, header, notify)
        work = plan(inputs, references, benchmarks, out, config.samples)
        for message in work.damaged:
            notify(message)
        if on_plan is not None:
            on_plan(work)
        failures = run_pending(work, teacher, secret, config, out, resources, on_record)
        return assemble(work, out, secret, config, header, tools, failures)
