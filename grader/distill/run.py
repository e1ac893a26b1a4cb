"""`gagar distill`: grade groups whose right order is known with a teacher model, keep what agrees.

Each group is graded K times by the LLM grader (the teacher), each time under labels and an order derived
from the run's secret and (group, sample), with data markers derived from (group, sample, call): what a
grading shows the model is reproducible from the run. Each sample's outcome is written at once to
`DIR/records/<group>/<sample>.json` (atomically, never twice), so a run killed at any point continues where
it was. When every sample is recorded, the outputs are assembled from the records alone, in a fixed order:
`sft.jsonl` and `sft_eval.jsonl` (train/eval split by task), optionally the OpenAI format, and
`manifest.json`. A resumed run therefore writes exactly the files an uninterrupted one does. Timings are
left out of records and outputs (they are all a rerun would change).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import random
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grader.distill import sft
from grader.distill.augment import AugmentationRefused, relabel
from grader.distill.benchmarks import Benchmarks, task_hash
from grader.errors import DistillError, GradingFailed, InvalidRanking, WorkspaceError
from grader.graders.llm.agent import LLMGrader
from grader.graders.llm.tools import constrain_labels, offered_tools, tool_schemas
from grader.graders.transcript import read_transcript
from grader.groups.formats import LoadFailure, load_groups
from grader.groups.models import Group
from grader.ranking.order import validate_ranking
from grader.ranking.references import Reference, load_references, reference_credit
from grader.util.atomic import remove_leftover_temporaries, write_text_atomic
from grader.util.concurrency import Concurrency, default_resources
from grader.util.jsontext import loads
from grader.workspace.workspace import Workspace, open_workspace, ref_name

log = logging.getLogger(__name__)

TIMING_KEYS = ("t", "seconds", "sleep")  # what a rerun changes: left out of records
FORMAT = 1


@dataclass
class DistillConfig:
    """How a distillation run samples, filters and writes."""

    samples: int = 4
    """Teacher gradings per group, each under fresh labels and candidate order."""
    min_agreement: float = field(default=1.0, metadata={"cli": "--min-agreement"})
    """Agreement with the reference (pairwise credit over its pairs, ties half) to keep a transcript."""
    augment: int = 0
    """Relabelled copies of each kept transcript (fresh labels, fresh order), added to its split."""
    eval_fraction: float = 0.1
    """Share of tasks held out in sft_eval.jsonl (no task on both sides)."""
    openai: bool = False
    """Also write openai_train.jsonl and openai_eval.jsonl (OpenAI's fine-tuning format)."""
    workers: int = 4
    """Gradings in flight at once (LLM calls, sandboxes and builds stay within the resources' bounds)."""

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError("--samples must be at least 1")
        if not 0.0 <= self.min_agreement <= 1.0:
            raise ValueError("--min-agreement must be in [0, 1]")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError("--eval-fraction must be in [0, 1)")
        if self.augment < 0 or self.workers < 1:
            raise ValueError("--augment must be >= 0 and --workers >= 1")


@dataclass
class Plan:
    """What a run will do: the groups it distils and why the others are left out."""

    groups: list[Group]
    references: dict[str, Reference]
    left_out: dict[str, dict[str, str]] = field(default_factory=dict)  # group id -> status, reason
    pending: list[tuple[Group, int]] = field(default_factory=list)  # (group, sample) not yet recorded
    damaged: list[str] = field(default_factory=list)  # records found damaged: moved aside, graded again


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@contextmanager
def _run_lock(out: Path) -> Iterator[None]:
    with open(out / ".lock", "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DistillError(f"{out}: another distillation run is writing here") from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare_out(out: Path, notify: Callable[[str], None] | None = None) -> str:
    """Make the output folder and read (or create) the run's secret; fails before any teacher call.

    Args:
        out: the output folder.
        notify: told when the secret is damaged and replaced (see `read_secret`; default: a log warning).

    Returns:
        The run's secret (`out/secret`, created with fresh randomness on the first run; put one there to
        reproduce another run's labels and markers).

    Raises:
        DistillError: the folder cannot be created or written, or another run is writing in it.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "records").mkdir(exist_ok=True)
        probe = out / f".probe-{os.getpid()}"
        probe.write_text("ok", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise DistillError(f"{out}: cannot write the output folder: {exc.strerror or exc}") from None
    # Under the run's lock: two runs started together would each make a secret, and one would grade under
    # the secret the other's write replaced.
    with _run_lock(out):
        return read_secret(out, notify)


def read_secret(out: Path, notify: Callable[[str], None] | None = None) -> str:
    """The run's secret from `out/secret`, made with fresh randomness when there is none.

    A secret that is not UTF-8 text or is empty (a cut write, a stray binary file) is moved aside to
    `secret.damaged-<time>` and replaced by a fresh one; `notify` is told (records made under the old
    secret keep their labels; only new samples use the new one).

    Args:
        out: the output folder (it exists).
        notify: told when the secret is damaged and replaced (default: a log warning).

    Returns:
        The secret, without surrounding white space.

    Raises:
        DistillError: the file cannot be read, moved aside or written.
    """
    notify = notify or log.warning
    path = out / "secret"
    try:
        if path.exists():
            try:
                secret = path.read_bytes().decode("utf-8").strip()
            except UnicodeDecodeError:
                secret = ""
            if secret:
                return secret
            moved = move_aside(path)
            notify(
                f"{path} is damaged (empty or not UTF-8 text): moved to {moved.name}; a new secret is made"
            )
        secret = secrets.token_hex(16)
        write_text_atomic(path, secret + "\n", mode=0o600)
        return secret
    except OSError as exc:
        raise DistillError(f"{path}: cannot read or write the run's secret: {exc.strerror or exc}") from None


def move_aside(path: Path) -> Path:
    """Rename a damaged file to `NAME.damaged-<UTC time>` (a counter added when taken), in its folder; the
    file is kept for a person to look at, never read again. The caller holds the run's lock: two writers
    moving files aside in the same second could otherwise pick the same name.

    Args:
        path: the damaged file.

    Returns:
        Its new path.

    Raises:
        OSError: the file cannot be renamed.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target, n = path.with_name(f"{path.name}.damaged-{stamp}"), 1
    while target.exists():
        target, n = path.with_name(f"{path.name}.damaged-{stamp}-{n}"), n + 1
    os.replace(path, target)
    return target


def record_problem(record: Any, group_id: str, sample: int) -> str | None:
    """Why a record read back cannot be used: what `assemble` reads must be there, of its type.

    Args:
        record: the record file's JSON value.
        group_id, sample: what the record's path says it records.

    Returns:
        The problem in words, or None when the record can be used.
    """
    if not isinstance(record, dict):
        return f"not a JSON object but {type(record).__name__}"
    if record.get("group_id") != group_id or record.get("sample") != sample:
        return (
            f"records {record.get('group_id')!r} sample {record.get('sample')!r}, not {group_id!r} {sample}"
        )
    if record.get("status") not in ("kept", "dropped"):
        return f"status {record.get('status')!r} is neither kept nor dropped"
    for key in ("category", "reason"):
        if not isinstance(record.get(key), str):
            return f"{key!r} is missing or not a string"
    usage = record.get("usage", {})
    if not isinstance(usage, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in usage.values()
    ):
        return "'usage' is not an object of numbers"
    if record["status"] == "kept":
        if not isinstance(record.get("messages"), list) or not isinstance(record.get("shown"), list):
            return "a kept record without its 'messages' and 'shown' lists"
        contrast = record.get("contrast") or []
        if not isinstance(contrast, list) or not all(isinstance(c, list) and len(c) == 2 for c in contrast):
            return "'contrast' is not a list of pairs"
    return None


def read_record(path: Path, group_id: str, sample: int) -> tuple[dict[str, Any] | None, str]:
    """The record at `path`, checked by `record_problem`.

    Args:
        path: the record's file (`record_path`).
        group_id, sample: what it should record.

    Returns:
        (record, "") for a usable record; (None, "") when there is no file; (None, why) when it is damaged
        (not UTF-8, not JSON, nested past the JSON reader, or missing what `assemble` reads).

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, ""
    record, problem = _json_of(data)
    if problem:
        return None, problem
    problem = record_problem(record, group_id, sample)
    return (None, problem) if problem else (record, "")


def _json_of(data: bytes) -> tuple[Any, str]:
    """The JSON value of a file's bytes, or None and why it has none (never an exception)."""
    try:
        return loads(data.decode("utf-8")), ""
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except ValueError as exc:
        return None, f"not JSON ({exc})"


def record_path(out: Path, group_id: str, sample: int) -> Path:
    """Where the record of (group, sample) lives."""
    return out / "records" / ref_name(group_id) / f"{sample}.json"


def plan(
    inputs: list[Path],
    references: dict[str, Reference],
    benchmarks: Benchmarks,
    out: Path,
    samples: int,
) -> Plan:
    """Decide which groups are distilled and which (group, sample) are still to grade.

    Args:
        inputs: group files.
        references: group id -> reference.
        benchmarks: the benchmarks whose groups are refused.
        out: the output folder (its records say what is done).
        samples: gradings per group.

    Returns:
        The plan. A group is left out, with the reason, when it is not valid, has no reference, belongs to
        a benchmark, or its reference names trajectories it does not have (named). A damaged record (cut,
        not JSON, or lacking what the outputs are built from) is moved aside (`move_aside`), named in
        `damaged`, and its sample is pending again.

    Raises:
        OSError: a record cannot be read or moved.
    """
    chosen = Plan(groups=[], references=references)
    seen: set[str] = set()
    for item in load_groups(inputs):
        if isinstance(item, LoadFailure):
            chosen.left_out[f"{item.source}"] = {"status": "failed", "reason": f"invalid group: {item}"}
            continue
        gid = item.group_id
        if gid in seen:
            chosen.left_out[gid] = {"status": "failed", "reason": "group id given twice; the first is used"}
            continue
        seen.add(gid)
        refusal = benchmarks.refusal(item)
        reference = references.get(gid)
        known = {t.id for t in item.trajectories}
        if refusal is not None:
            chosen.left_out[gid] = {"status": "refused", "reason": refusal}
        elif reference is None:
            chosen.left_out[gid] = {"status": "refused", "reason": "no reference for this group"}
        elif reference.ids() - known:
            unknown = ", ".join(sorted(reference.ids() - known))
            chosen.left_out[gid] = {
                "status": "failed",
                "reason": f"the reference names trajectories the group does not have: {unknown}",
            }
        else:
            chosen.groups.append(item)
    for sample in range(
        samples
    ):  # sample-major: the workers spread over groups (one grading per group at once)
        for group in chosen.groups:
            path = record_path(out, group.group_id, sample)
            record, problem = read_record(path, group.group_id, sample)
            if problem:
                moved = move_aside(path)
                chosen.damaged.append(f"{path} is damaged ({problem}): moved to {moved.name}; graded again")
            if record is None:
                chosen.pending.append((group, sample))
    return chosen


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


def _example_rows(
    record: dict[str, Any], tools: list[dict[str, Any]], augment: int, secret: str
) -> tuple[list[tuple[int, dict[str, Any]]], str | None]:
    """(copy, row) for a kept record: the transcript itself (copy 0), then its relabelled copies; and why
    no copies were made, when relabelling was refused."""
    # Each example carries the tools as its grading sent them: label arguments are enums of its own labels.
    contrast = [label for label, _ in record.get("contrast") or []]
    rows = [(0, sft.example(record["messages"], constrain_labels(tools, record["shown"], contrast)))]
    for copy in range(1, augment + 1):
        rng = random.Random(f"{secret}:{record['group_id']}:{record['sample']}:{copy}")
        try:
            messages, relabelling = relabel(record["messages"], record["shown"], contrast, rng)
        except AugmentationRefused as exc:
            return rows[:1], str(exc)
        served = constrain_labels(tools, relabelling.order, relabelling.contrast)
        rows.append((copy, sft.example(messages, served)))
    return rows, None


def assemble(
    work: Plan,
    out: Path,
    secret: str,
    config: DistillConfig,
    header: dict[str, Any],
    tools: list[dict[str, Any]],
    workspace_failures: dict[str, str],
) -> dict[str, Any]:
    """Write the outputs from the records alone, in (group, sample) order: same records, same files.

    Args:
        work: the plan.
        out: the output folder.
        secret: the run's secret (augmentation draws from it).
        config: the run's settings.
        header: the manifest's fixed part (teacher, fingerprints, settings).
        tools: the tool schemas the trained grader will be served with.
        workspace_failures: groups whose workspace could not be built, with the reason.

    Returns:
        The manifest (also written to `out/manifest.json`).

    Raises:
        DistillError: a record was damaged after this run wrote it (named; a rerun grades it again).
    """
    eval_tasks = sft.split_tasks([task_hash(g) for g in work.groups], config.eval_fraction)
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "eval": []}
    seen: dict[str, str] = {}
    transcripts, groups = [], dict(sorted(work.left_out.items()))
    tokens = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for group in sorted(work.groups, key=lambda g: g.group_id):
        gid = group.group_id
        split = "eval" if task_hash(group) in eval_tasks else "train"
        if gid in workspace_failures:
            groups[gid] = {"status": "failed", "reason": workspace_failures[gid]}
            continue
        records = []
        for sample in range(config.samples):
            path = record_path(out, gid, sample)
            record, problem = read_record(path, gid, sample)
            if problem:  # written by this run a moment ago: only something else could have damaged it
                raise DistillError(f"{path} was damaged while the run was writing ({problem}); run again")
            if record is not None:
                records.append(record)
        kept = 0
        for record in records:
            for key in tokens:
                tokens[key] += int(record.get("usage", {}).get(key, 0))
            entry = {
                "group": gid,
                "sample": record["sample"],
                "kept": record["status"] == "kept",
                "why": record["category"],
                "reason": record["reason"],
                "agreement": record.get("agreement"),
                "pairs": record.get("pairs"),
                "tokens": int(record.get("usage", {}).get("total_tokens", 0)),
                "tool_calls": int(record.get("usage", {}).get("tool_calls", 0)),
            }
            if entry["kept"]:
                rows = []
                made, refused = _example_rows(record, tools, config.augment, secret)
                if refused is not None:
                    entry["augmentation_refused"] = refused
                for copy, row in made:
                    key = sft.row_hash(row)
                    if key in seen:
                        if copy == 0:
                            entry.update(
                                kept=False, why="duplicate", reason=f"exact duplicate of {seen[key]}"
                            )
                        continue
                    seen[key] = f"{gid}/{record['sample']}" + (f" copy {copy}" if copy else "")
                    rows.append(row)
                if entry["kept"]:
                    kept += 1
                    entry.update(split=split, rows=len(rows))
                    splits[split].extend(rows)
            transcripts.append(entry)
        groups[gid] = {
            "status": "distilled",
            "split": split,
            "task": task_hash(group),
            "samples": len(records),
            "kept": kept,
        }
    files = {"train": "sft.jsonl", "eval": "sft_eval.jsonl"}
    for name, rows in splits.items():
        write_text_atomic(out / files[name], "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
        if config.openai:
            text = "".join(json.dumps(sft.openai_example(row), sort_keys=True) + "\n" for row in rows)
            write_text_atomic(out / f"openai_{name}.jsonl", text)
    why = [t["why"] for t in transcripts]
    manifest = {
        **header,
        "counts": {
            "groups": len(groups),
            "distilled": sum(g["status"] == "distilled" for g in groups.values()),
            "refused": sum(g["status"] == "refused" for g in groups.values()),
            "failed": sum(g["status"] == "failed" for g in groups.values()),
            "transcripts": len(transcripts),
            "kept": why.count("kept"),
            "dropped": {c: why.count(c) for c in ("agreement", "budget", "failure", "duplicate")},
            "keep_rate": round(why.count("kept") / len(why), 4) if why else None,
            "rows": {"train": len(splits["train"]), "eval": len(splits["eval"])},
        },
        "tokens": tokens,
        "groups": groups,
        "transcripts": transcripts,
    }
    write_text_atomic(out / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest


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


def check_resume(out: Path, header: dict[str, Any], notify: Callable[[str], None] | None = None) -> None:
    """Refuse to continue a run whose teacher, prompts, tools, reference or settings were different.

    Args:
        out: the output folder.
        header: this run's manifest header.
        notify: told when `run.json` is damaged (it is moved aside and written again; default: a log
            warning).

    Raises:
        DistillError: `out/run.json` records another run; the message names what differs.
        OSError: `run.json` cannot be read, moved or written.
    """
    path = out / "run.json"
    identity = {k: header[k] for k in ("format", "fingerprints", "settings")}
    # The teacher by model and fingerprint, not by address: a resumed run may reach it on another port.
    identity["teacher"] = {k: v for k, v in header["teacher"].items() if k != "base_url"}
    notify = notify or log.warning
    before: Any = None
    if path.exists():
        before, problem = _json_of(path.read_bytes())
        if not problem and not isinstance(before, dict):
            problem = f"not a JSON object but {type(before).__name__}"
        if problem:
            moved = move_aside(path)
            notify(
                f"{path} is damaged ({problem}): moved to {moved.name}; the records already made cannot "
                "be checked against this run's settings, and are kept"
            )
            before = None
    if before is not None:
        differs = sorted(k for k in identity if before.get(k) != identity[k])
        if differs:
            raise DistillError(
                f"{out} holds a run with other {', '.join(differs)}; use a new folder (or the same options)"
            )
        return
    write_text_atomic(path, json.dumps(identity, indent=2, sort_keys=True) + "\n")


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
    with _run_lock(out):
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
