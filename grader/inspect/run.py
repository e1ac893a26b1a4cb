"""A run directory read back (results, the groups' patches, transcripts) and the facts viewers share.

`gagar grade --out DIR` leaves `results.jsonl`, `groups.jsonl` (the input groups, so patches can be shown
without the original files) and, for the LLM grader, `transcripts/`. Only `results.jsonl` is required: older
runs or runs written through the Python API may lack the others, and viewers then say what is missing.

Every file read resolves inside the run directory (symbolic links followed): a `groups.jsonl` or a transcript
that points elsewhere is refused, named, and a `results.jsonl` that does is an error, so nothing from outside
the run ends up in a report meant to be shared.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from grader.errors import InputFileError
from grader.groups.formats import LoadFailure, load_groups
from grader.groups.models import Group, GroupResult, TrajectoryReport
from grader.util.jsontext import loads

RESULTS = "results.jsonl"
GROUPS = "groups.jsonl"
TRANSCRIPTS = "transcripts"

# Signals that describe a candidate rather than object to it: they are present on every candidate, so
# counting them as "fired" would drown the ones a reviewer cares about (leftover files, edited tests...).
DESCRIPTIVE_SIGNALS = frozenset({"files", "changed_lines", "equivalent_to"})
INJECTION = "injection"


@dataclass
class Run:
    """One run directory. `groups` is None when the run has no groups.jsonl (patches not available)."""

    directory: Path
    results: list[GroupResult]
    groups: dict[str, Group] | None
    group_problems: list[str] = field(default_factory=list)

    def result(self, group_id: str) -> GroupResult:
        """The result of `group_id`. Raises ValueError naming the run and the groups it does have."""
        for result in self.results:
            if result.group_id == group_id:
                return result
        known = ", ".join(r.group_id for r in self.results[:10])
        more = f" and {len(self.results) - 10} more" if len(self.results) > 10 else ""
        raise ValueError(f"{self.directory} has no group {group_id!r}; it has {known}{more}")

    def group(self, group_id: str) -> Group | None:
        return None if self.groups is None else self.groups.get(group_id)

    def patch(self, group_id: str, trajectory_id: str) -> str | None:
        """The trajectory's patch as submitted, or None when the run does not carry it."""
        group = self.group(group_id)
        if group is None:
            return None
        try:
            return group.trajectory(trajectory_id).patch
        except KeyError:
            return None

    def patch_note(self, group_id: str) -> str:
        """Why patches are missing for a group ("" when they are there), worded for a reader."""
        if self.groups is None and self.group_problems:  # refused: it points outside the run
            return f"patch not available: {self.group_problems[0]}"
        if self.groups is None:
            return f"patch not available: {self.directory / GROUPS} does not exist"
        if group_id not in self.groups:
            return f"patch not available: group {group_id!r} is not in {self.directory / GROUPS}"
        return ""

    def transcript_path(self, result: GroupResult) -> Path | None:
        """Where the group's transcript is, also when the run directory was moved or copied since grading;
        None when it is not found or lies outside the run directory (see `read_transcript`)."""
        return self._locate_transcript(result)[0]

    def _locate_transcript(self, result: GroupResult) -> tuple[Path | None, str]:
        # The run's own `transcripts/` comes first: a copy of a run shows its copy, not the original's file.
        # Only files inside the run directory (symbolic links resolved) are read: a `transcript` field of
        # `../x` or `/home/me/.ssh/id_rsa` must not end up in a report meant to be shared.
        if not result.transcript:
            return None, "transcript not found: (no path recorded)"
        recorded = Path(result.transcript)
        inside = [] if recorded.is_absolute() else [self.directory / recorded]
        root = self.directory.resolve()
        outside: list[Path] = []
        for path in [*inside, self.directory / TRANSCRIPTS / recorded.name, recorded]:
            if not path.is_file():
                continue
            if path.resolve().is_relative_to(root):
                return path, ""
            outside.append(path)
        if outside:
            return None, (
                f"transcript refused: {result.transcript} resolves to {outside[0].resolve()}, "
                f"outside the run directory {self.directory}"
            )
        return None, f"transcript not found: {result.transcript}"

    def read_transcript(self, result: GroupResult) -> TranscriptReading:
        """The group's transcript events, or why there are none: not found, outside the run directory
        (refused, named), or damaged (the file and line named). Never raises for a bad file."""
        path, note = self._locate_transcript(result)
        if path is None:
            return TranscriptReading(None, None, note)
        events: list[dict[str, Any]] = []
        try:
            with open(path, encoding="utf-8") as handle:
                for number, line in enumerate(handle, start=1):
                    if not line.strip():
                        continue
                    try:
                        event = loads(line)
                    except ValueError as exc:
                        return TranscriptReading(None, path, f"transcript damaged: {path}:{number}: {exc}")
                    if not isinstance(event, dict):
                        note = f"transcript damaged: {path}:{number}: not a JSON object"
                        return TranscriptReading(None, path, note)
                    events.append(event)
        except UnicodeDecodeError as exc:
            return TranscriptReading(None, path, f"transcript damaged: {path}: not UTF-8 ({exc.reason})")
        except OSError as exc:
            return TranscriptReading(None, path, f"transcript unreadable: {path}: {exc.strerror or exc}")
        return TranscriptReading(events, path, "")

    def transcript(self, result: GroupResult) -> list[dict[str, Any]] | None:
        """The group's transcript events; None when it has none that can be read (see `read_transcript`)."""
        return self.read_transcript(result).events


@dataclass
class TranscriptReading:
    """A group's transcript as read from its run: `events`, or None and the `note` saying why."""

    events: list[dict[str, Any]] | None
    path: Path | None
    note: str


def _outside(directory: Path, path: Path) -> str:
    """Why `path` may not be read as part of the run in `directory` ("" when it resolves inside it)."""
    resolved = path.resolve()
    if resolved.is_relative_to(directory.resolve()):
        return ""
    return f"{path} resolves to {resolved}, outside the run directory {directory}"


def load_run(directory: Path | str) -> Run:
    """Read a run directory; only files that resolve inside it.

    Args:
        directory: the run directory (`gagar grade --out`).

    Returns:
        The run; a `groups.jsonl` that resolves outside the directory is left out (`groups` None) and named in
        `group_problems`.

    Raises:
        FileNotFoundError: no results.jsonl.
        InputFileError: results.jsonl resolves outside the directory (a ValueError).
        ValueError: a line of results.jsonl is not a result.
    """
    directory = Path(directory)
    path = directory / RESULTS
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {directory} a run directory of `gagar grade`?")
    if outside := _outside(directory, path):
        raise InputFileError(f"{RESULTS} refused: {outside}")
    results = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                results.append(GroupResult.model_validate_json(line))
            except ValidationError as exc:
                raise ValueError(f"{path}:{number} is not a result line: {exc.errors()[0]['msg']}") from None
    groups: dict[str, Group] | None = None
    problems: list[str] = []
    if (directory / GROUPS).is_file() and (outside := _outside(directory, directory / GROUPS)):
        problems.append(f"refused: {outside}")
    elif (directory / GROUPS).is_file():
        groups = {}
        for item in load_groups([directory / GROUPS]):
            if isinstance(item, LoadFailure):
                problems.append(str(item))
            else:
                groups[item.group_id] = item
    return Run(directory=directory, results=results, groups=groups, group_problems=problems)


# -- facts about one result, shared by the terminal and HTML views ----------------------------------------


def fired_signals(report: TrajectoryReport) -> list[str]:
    """Names of the signals that object to this candidate: a non-empty list, a positive count or True.

    Floats are scores (penalty, size ratio, confidence), not objections, so they never count.
    """
    fired = []
    for name, value in report.signals.items():
        if name in DESCRIPTIVE_SIGNALS:
            continue
        if isinstance(value, bool):
            hit = value
        elif isinstance(value, int):
            hit = value > 0
        elif isinstance(value, list | tuple | dict | str):
            hit = len(value) > 0
        else:
            hit = False
        if hit:
            fired.append(name)
    return fired


def rank_of(result: GroupResult) -> dict[str, int]:
    return {tid: rank for rank, tier in enumerate(result.ranking, start=1) for tid in tier}


def candidate_order(result: GroupResult) -> list[str]:
    """Ranked trajectories best first, then passing ones left out of the ranking, then failing ones."""
    ranked = [tid for tier in result.ranking for tid in tier]
    known = list(dict.fromkeys([*result.trajectories, *result.advantages_before]))
    unranked = [t for t in known if t not in ranked]

    def failing(tid: str) -> bool:
        report = result.trajectories.get(tid)
        return report is not None and not report.passed

    return ranked + [t for t in unranked if not failing(t)] + [t for t in unranked if failing(t)]


def weight_spread(result: GroupResult) -> float | None:
    """Best minus worst weight: how much the ranking moved credit (None when nothing was weighted)."""
    if not result.weights:
        return None
    return max(result.weights.values()) - min(result.weights.values())


def top_candidates(result: GroupResult) -> list[str]:
    return list(result.ranking[0]) if result.ranking else []


def group_flags(result: GroupResult) -> list[str]:
    """The distinct objections raised in a group: fired signal names, and `injection` when flagged."""
    names: dict[str, None] = {}
    if any(result.flags.values()):
        names[INJECTION] = None
    for report in result.trajectories.values():
        for name in fired_signals(report):
            names[name] = None
    return list(names)


def tokens(result: GroupResult) -> int:
    usage = result.usage
    return int(usage.get("total_tokens", usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)))


# -- the whole run -------------------------------------------------------------------------------------------


@dataclass
class Summary:
    """Counts over a run: what a reader checks first before opening any group."""

    groups: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    graders: Counter[str] = field(default_factory=Counter)
    models: Counter[str] = field(default_factory=Counter)
    tokens: int = 0
    requests: int = 0
    tool_calls: int = 0
    retries: int = 0
    seconds: float = 0.0
    slowest: tuple[float, str] | None = None
    prompt_tokens: int = 0  # of `tokens`
    cached_prompt_tokens: int = 0  # of those, served from the server's prefix cache, where it said so
    spreads: list[float] = field(default_factory=list)
    identity: Counter[str] = field(default_factory=Counter)  # why redistribution left a graded group alone
    signals: Counter[str] = field(default_factory=Counter)  # signal name -> candidates it fired on
    signal_groups: Counter[str] = field(default_factory=Counter)  # signal name -> groups it fired in
    injected: int = 0  # candidates flagged for a prompt injection
    failures: Counter[str] = field(default_factory=Counter)  # failure reason (first clause) -> groups

    def spread_stats(self) -> dict[str, float] | None:
        if not self.spreads:
            return None
        return {
            "min": min(self.spreads),
            "median": statistics.median(self.spreads),
            "mean": statistics.fmean(self.spreads),
            "max": max(self.spreads),
        }

    def top_flags(self, limit: int = 8) -> list[tuple[str, int, int]]:
        """(name, candidates, groups), most frequent first; injection flags are always listed first."""
        flags = [(name, count, self.signal_groups[name]) for name, count in self.signals.most_common()]
        flags.sort(key=lambda f: (f[0] != INJECTION, -f[1], f[0]))
        return flags[:limit]


def _reason_kind(reason: str) -> str:
    # Failure reasons quote ids, paths and numbers: masking those and keeping the first two clauses groups
    # like failures together ("llm grader failed: turn budget exhausted (…)").
    masked = re.sub(r"\([^()]*\)|'[^']*'|\"[^\"]*\"|\d+(\.\d+)?", "…", reason)
    return ": ".join(masked.split(": ")[:2])[:120]


def summarize(results: list[GroupResult]) -> Summary:
    summary = Summary(groups=len(results))
    for result in results:
        summary.statuses[result.status] += 1
        summary.graders[result.grader] += 1
        model = result.details.get("model")
        if model:
            summary.models[str(model)] += 1
        summary.tokens += tokens(result)
        summary.prompt_tokens += int(result.usage.get("prompt_tokens", 0))
        summary.cached_prompt_tokens += int(result.usage.get("cached_prompt_tokens", 0))
        summary.requests += int(result.usage.get("requests", 0))
        summary.tool_calls += int(result.usage.get("tool_calls", 0))
        summary.retries += int(result.usage.get("retries", 0))
        summary.seconds += result.seconds
        if summary.slowest is None or result.seconds > summary.slowest[0]:
            summary.slowest = (result.seconds, result.group_id)
        spread = weight_spread(result)
        if result.status == "graded" and spread is not None:
            summary.spreads.append(spread)
        outcome = result.redistribution_outcome
        if result.status == "graded" and outcome is not None and not outcome.applied:
            summary.identity[outcome.text] += 1
        elif result.status == "graded" and outcome is None and result.redistribution.startswith("identity"):
            # results written by gagar 0.1 carry the reason in words only
            summary.identity[result.redistribution.removeprefix("identity: ")[:120]] += 1
        if result.status == "failed":
            summary.failures[_reason_kind(result.reason)] += 1
        flagged = [tid for tid, hits in result.flags.items() if hits]
        summary.injected += len(flagged)
        in_group: set[str] = set()
        if flagged:
            summary.signals[INJECTION] += len(flagged)
            in_group.add(INJECTION)
        for report in result.trajectories.values():
            for name in fired_signals(report):
                if name == INJECTION:
                    continue  # counted from result.flags, which failed gradings carry too
                summary.signals[name] += 1
                in_group.add(name)
        for name in in_group:
            summary.signal_groups[name] += 1
    return summary


def dumps_compact(value: Any) -> str:
    """A signal value as one short line of text."""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return f"{value:g}"
    return json.dumps(value, ensure_ascii=False)
