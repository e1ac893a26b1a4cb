"""The grader's tools: list, diff, read, search and run over one group's view, under random candidate labels.

Schemas and descriptions come from `prompts/tools.json`; this module implements them. Everything a tool
returns that comes from a candidate or the repository is wrapped as data with a per-call random marker, and
capped at line boundaries (head and tail lines kept, the lines cut named). The first `run` of a grading also
says which Python and environment the sandbox has; `search` leaves vendored trees out unless asked. The agent
loop sees tools only through `schemas()` and `call()`.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import random
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grader.errors import ToolError
from grader.graders.llm.arguments import parse_arguments, tiers_as_ranking, tool_errors
from grader.graders.llm.budgets import Budgets
from grader.graders.llm.runs import (
    describe_sandbox,
    render_targets,
    run_timeout,
    same_failure,
    split_budget,
)
from grader.ranking.order import InvalidRanking, validate_ranking
from grader.sandbox.base import Sandbox, SandboxError
from grader.sandbox.output import cap_lines
from grader.workspace.hunks import split_lines
from grader.workspace.injections import find_injections
from grader.workspace.view import BASE, GradingView

DEFAULT_OUTPUT_CHARS = 12_000
DEFAULT_PAGE_CHARS = 8_000
SUBMIT = "submit_ranking"
FINAL_REASON_CHARS = (20, 200)
"""The shortest and longest bound on each label's reason in the final turn's submit_ranking (one sentence)."""
VENDORED_DIRS = frozenset(
    {
        "vendor",
        "vendored",
        "_vendor",
        "third_party",
        "thirdparty",
        "third-party",
        "externals",
        "extern",
        "node_modules",
        "bower_components",
        "site-packages",
        "dist-packages",
    }
)
"""Directory names whose trees `search` leaves out by default: copies of other projects' code, whose hits
crowd out the repository's own (as prompts/tools.json says)."""


def compact_diff(text: str) -> str:
    """A unified diff without the header lines a reviewer does not need: `index` (blob hashes) and the
    `---`/`+++` pair that repeats the paths of `diff --git` (new, deleted and renamed files keep their mode
    and rename lines, which say the same). Hunks are untouched.

    Args:
        text: `git diff` output.

    Returns:
        The same diff, shorter by three lines a file.
    """
    kept, in_header = [], False
    for line in split_lines(text):
        if line.startswith("diff --git "):
            in_header = True
        elif line.startswith("@@"):
            in_header = False
        elif in_header and line.startswith(("index ", "--- ", "+++ ")):
            continue
        kept.append(line)
    return "".join(kept)


class Markers:
    """The data markers of one grading: fresh randomness, or, given a key, a sequence derived from it.

    A keyed sequence makes what a grading shows the model reproducible (the n-th marker is an HMAC of n under
    the key), while candidate text still cannot guess a marker without the key.
    """

    def __init__(self, key: str | None = None) -> None:
        self._key = key.encode() if key is not None else None
        self._count = 0
        self._lock = threading.Lock()

    def __call__(self) -> str:
        """The next marker: 12 hex digits."""
        if self._key is None:
            return secrets.token_hex(6)
        with self._lock:
            number, self._count = self._count, self._count + 1
        return hmac.new(self._key, str(number).encode(), hashlib.sha256).hexdigest()[:12]


def wrap(text: str, markers: Callable[[], str] | None = None) -> str:
    """Mark text as data with a marker content cannot know, so it cannot forge the end of its own wrapper.

    Args:
        text: the data.
        markers: where the marker comes from (default: fresh randomness).

    Returns:
        The text between `<<<DATA m>>>` and `<<<END m>>>` lines.
    """
    marker = (markers or Markers())()
    return f"<<<DATA {marker}>>>\n{text}\n<<<END {marker}>>>"


def offered_tools(specs: list[dict[str, Any]], run: bool) -> list[dict[str, Any]]:
    """The tool specs a grading offers: all of them, less `run` when no sandbox is configured.

    Args:
        specs: the tool specs (`prompts/tools.json`).
        run: whether a sandbox is configured.

    Returns:
        The specs offered, in their order.
    """
    return [spec for spec in specs if spec["name"] != "run" or run]


def tool_schemas(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool specs in the chat-completions `tools` format (what the endpoint is sent)."""
    return [{"type": "function", "function": spec} for spec in specs]


def constrain_labels(
    tools: list[dict[str, Any]], ranked: list[str], contrast: list[str]
) -> list[dict[str, Any]]:
    """A copy of `tools` (chat-completions format) whose label arguments are each an `enum` of a grading's
    labels (`ranked`: the candidates shown, `contrast`: the failing ones shown for contrast), its arrays
    bounded by `maxItems`, and a confidence from 0 to 1 one of the tenths: exactly what that grading sends, so
    a distilled example can carry it too."""
    shown = [*ranked, *contrast]
    labels: dict[str, list[str]] = {
        "candidate": shown,
        "against": [BASE, *shown],
        "target": [BASE, *shown],
        "targets": [BASE, *ranked],
        "ranking": list(ranked),
    }
    tools = json.loads(json.dumps(tools))
    for tool in tools:
        for name, schema in tool["function"]["parameters"].get("properties", {}).items():
            allowed = labels.get(name)
            if allowed is None:
                continue
            while schema.get("type") == "array":  # the label inside (ranking: a list of lists of labels)
                schema["maxItems"] = len(allowed)  # bounds what a constrained decoder can emit
                schema = schema["items"]
            if schema.get("type") == "string":
                schema["enum"] = allowed
        confidence = tool["function"]["parameters"].get("properties", {}).get("confidence")
        if confidence is not None and (confidence.get("minimum"), confidence.get("maximum")) == (0, 1):
            # Tenths, listed: grammars hold a number to an enum but not to a minimum and maximum (llama.cpp's
            # held Gemma 3 270M to neither: it wrote 1000000000000000 on every repair).
            confidence["enum"] = [round(tenth / 10, 1) for tenth in range(11)]
    return tools


@dataclass
class Candidates:
    """The labels the grader sees, and what they stand for."""

    order: list[str]  # candidate labels, in the order shown
    members: dict[
        str, list[str]
    ]  # label -> trajectory ids of its equivalence class (first is representative)
    contrast: dict[str, str] = field(default_factory=dict)  # failing label -> trajectory id
    seed: int = 0

    def trajectory(self, label: str) -> str:
        """The trajectory a label stands for (a class's representative). Raises ToolError listing the labels
        when it names none."""
        if label in self.members:
            return self.members[label][0]
        if label in self.contrast:
            return self.contrast[label]
        raise ToolError(f"unknown label {label!r}; labels: {', '.join(self.order + list(self.contrast))}")


def assign_labels(view: GradingView, seed: int, show_failing: bool = False) -> Candidates:
    """Random labels in a random order (both from `seed`), one per class of equivalent patches."""
    rng = random.Random(seed)
    classes = [list(ids) for ids in view.classes]
    rng.shuffle(classes)
    used: set[str] = set()

    def fresh(prefix: str) -> str:
        while True:
            label = f"{prefix}-{''.join(rng.choices('abcdefghjkmnpqrstuvwxyz23456789', k=4))}"
            if label not in used:
                used.add(label)
                return label

    members = {fresh("C"): list(ids) for ids in classes}
    contrast: dict[str, str] = {}
    if show_failing:
        failing = [c.trajectory_id for c in view.candidates() if not c.passed and c.applied]
        rng.shuffle(failing)
        contrast = {fresh("F"): tid for tid in failing}
    return Candidates(order=list(members), members=members, contrast=contrast, seed=seed)


@dataclass
class Submission:
    """A validated ranking, in trajectory ids, with the grader's reasons and confidence."""

    ranking: list[list[str]]
    reasons: dict[str, str]
    confidence: float
    labels: list[list[str]]


class Toolbox:
    """The tools over one group's view. `sandbox_opener` starts a sandbox on first `run` (None: no `run`)."""

    def __init__(
        self,
        view: GradingView,
        candidates: Candidates,
        specs: list[dict[str, Any]],
        sandbox_opener: Callable[[], Sandbox] | None = None,
        output_chars: int = DEFAULT_OUTPUT_CHARS,
        page_chars: int = DEFAULT_PAGE_CHARS,
        sandbox_slots: threading.Semaphore | None = None,
        markers: Callable[[], str] | None = None,
        reply_tokens: int = Budgets.max_output_tokens,
        sandbox_budget: float = Budgets.sandbox_seconds,
    ) -> None:
        self.view = view
        self.reply_tokens = reply_tokens  # what one reply may hold: the final call is bounded to fit it
        self.candidates = candidates
        self.specs = {spec["name"]: spec for spec in offered_tools(specs, sandbox_opener is not None)}
        self.markers = markers or Markers()
        self._schemas: list[dict[str, Any]] | None = None
        self.output_chars = output_chars
        self.page_chars = page_chars
        self._sandbox_opener = sandbox_opener
        # A sandbox is a container (or a local sandbox): hold one of the process's slots while it is open.
        self._sandbox_slots = sandbox_slots if sandbox_slots is not None else view.resources.sandbox
        self.waited = 0.0  # seconds spent waiting for a slot: not the grading's time, so not its budget's
        self.environment_seconds = 0.0  # opening the sandbox (building the task's environment): no budget's
        self.sandbox_seconds = 0.0  # in `run`'s commands: their own budget's, `sandbox_budget`
        self.sandbox_budget = sandbox_budget
        self._sandbox: Sandbox | None = None
        self._sandbox_error: str | None = None
        self.sandbox_failure: str | None = None
        """Why the sandbox could not open, in full for people (log paths, pip's words); the model is told
        the task-level reason alone (`EnvironmentBuildError.reason`)."""
        self._sandbox_described = False  # the first run that reaches the sandbox says what it runs on

    def schemas(self) -> list[dict[str, Any]]:
        """The tools in the chat-completions `tools` format, each label argument an `enum` of this group's
        labels: a server that constrains tool calls to their schema (llama.cpp's grammar, vLLM's and
        SGLang's structured outputs) then cannot produce a label that does not exist. Fixed for a grading, so
        every request of it sends the same tools (made once; callers must not change them)."""
        if self._schemas is None:
            self._schemas = constrain_labels(
                tool_schemas(list(self.specs.values())), self.candidates.order, list(self.candidates.contrast)
            )
        return self._schemas

    def names(self) -> list[str]:
        return list(self.specs)

    def call(self, name: str, raw_arguments: str | dict[str, Any] | None) -> str:
        """Run one tool and return its text for the model.

        Raises:
            ToolError: the call the model got wrong, or anything else the tool raised on its arguments (a
                value git or the sandbox refuses, say), named: the model is told, as of any bad call, and
                the grading goes on.
        """
        if name not in self.specs:
            raise ToolError(f"unknown tool {name!r}; tools: {', '.join(self.specs)}")
        with tool_errors(name):
            arguments = parse_arguments(raw_arguments, self.specs[name]["parameters"])
            if name == SUBMIT:
                raise ToolError("submit_ranking is handled by the grader loop")  # never reached from the loop
            handler = getattr(self, f"_tool_{name}")
            return handler(**arguments)

    def final_schemas(self) -> list[dict[str, Any]]:
        """submit_ranking alone, as the final turn offers it: the ranking as `tiers`, an object with one
        required tie-group number per label, so a constrained decoder ranks each label exactly once by
        construction (under `ranking`, Gemma 3 270M on llama-cpp-python listed every label in two tie groups,
        repair after repair). `submission` reads it as the tie groups it stands for. The reasons are one
        string per label and no other key, their lengths together at most half of `reply_tokens` characters
        (a model can spend a token a character: Gemma 3 270M wrote reasons of digits and commas), each within
        `FINAL_REASON_CHARS`, so the whole call fits a reply (with reasons as an open map, Gemma wrote made-up
        keys until the 300-token turn limit cut the call, turn after turn)."""
        (submit,) = [s for s in self.schemas() if s["function"]["name"] == SUBMIT]
        submit = json.loads(json.dumps(submit))
        parameters = submit["function"]["parameters"]
        order = self.candidates.order
        number = {"type": "integer", "enum": list(range(1, len(order) + 1))}
        tiers = {
            "type": "object",
            "description": "Each candidate's tie group: 1 for the best, 2 for the next; equal numbers tie.",
            "properties": dict.fromkeys(order, number),
            "required": list(order),
            "additionalProperties": False,
        }
        shortest, longest = FINAL_REASON_CHARS
        reason = {
            "type": "string",
            "maxLength": max(shortest, min(longest, self.reply_tokens // 2 // len(order))),
        }
        reasons = {
            "type": "object",
            "description": "Each candidate's reason, one sentence.",
            "properties": dict.fromkeys(order, reason),
            "required": list(order),
            "additionalProperties": False,
        }
        parameters["properties"] = {
            "tiers": tiers,
            **{k: v for k, v in parameters["properties"].items() if k != "ranking"},
            "reasons": reasons,
        }
        parameters["required"] = ["tiers" if name == "ranking" else name for name in parameters["required"]]
        return [submit]

    def submission(self, raw_arguments: str | dict[str, Any] | None) -> Submission:
        """Check a submit_ranking call (its ranking as `ranking`, tie groups, or as `tiers`, a tie-group
        number per label: `final_schemas`); ToolError names unknown, missing or duplicated labels, and
        anything else its arguments break (as `call`)."""
        with tool_errors(SUBMIT):
            return self._submission(raw_arguments)

    def _submission(self, raw_arguments: str | dict[str, Any] | None) -> Submission:
        raw_arguments = tiers_as_ranking(raw_arguments)
        arguments = parse_arguments(raw_arguments, self.specs[SUBMIT]["parameters"])
        try:
            labels = validate_ranking(arguments["ranking"], self.candidates.order)
        except InvalidRanking as exc:
            raise ToolError(
                f"invalid ranking: {exc}. Every label must appear exactly once: "
                f"{', '.join(self.candidates.order)}"
            ) from None
        reasons = {str(k): str(v) for k, v in arguments["reasons"].items()}
        ranking = [[tid for label in tier for tid in self.candidates.members[label]] for tier in labels]
        by_trajectory = {
            tid: reasons.get(label, "") for label, ids in self.candidates.members.items() for tid in ids
        }
        return Submission(
            ranking=ranking, reasons=by_trajectory, confidence=float(arguments["confidence"]), labels=labels
        )

    def close(self) -> None:
        if self._sandbox is not None:
            try:
                self._sandbox.close()
            finally:
                self._sandbox = None
                self._sandbox_slots.release()

    # -- the tools ---------------------------------------------------------------------------------------

    def _wrap(self, text: str) -> str:
        return wrap(text, self.markers)

    def _target(self, label: str) -> str:
        return BASE if label == BASE else self.candidates.trajectory(label)

    def _tool_list_candidates(self) -> str:
        rows = []
        for label in self.candidates.order:
            c = self.view.candidate(self.candidates.members[label][0])
            stats = c.stats
            files = ", ".join(stats.files) if stats else "?"
            size = f"+{stats.lines_added} -{stats.lines_removed}" if stats else ""
            same = len(self.candidates.members[label])
            rows.append(f"{label}: {size} in {files}" + (f" (submitted {same} times)" if same > 1 else ""))
        for label, tid in self.candidates.contrast.items():
            stats = self.view.candidate(tid).stats
            rows.append(
                f"{label} (FAILED the tests; for contrast only): {', '.join(stats.files) if stats else '?'}"
            )
        note = ""  # outside the data: the grader's word, not the candidates'
        if any(len(ids) > 1 for ids in self.candidates.members.values()):
            note = "\nidentical submissions are one candidate: they share its rank; the count is not a vote"
        return self._wrap("\n".join(rows)) + note

    def _tool_diff(self, candidate: str, against: str = BASE, path: str | None = None, page: int = 1) -> str:
        paths = [path] if path else None
        text = compact_diff(self.view.diff(self._target(candidate), self._target(against), paths=paths))
        pages = paginate(text, self.page_chars)
        if page > len(pages):
            raise ToolError(f"page {page} does not exist; the diff has {len(pages)} page(s)")
        # Each result names what it is about: a result answers its call by id only, and a reviewer matched
        # diffs to the wrong labels.
        about = f"diff of {candidate} against {against}" + (f", {path}" if path else "")
        note = f", page {page} of {len(pages)}" if len(pages) > 1 else ""
        return f"{about}{note}\n" + self._wrap(pages[page - 1] or "(no differences)")

    def _tool_read_file(
        self, target: str, path: str, start_line: int = 1, end_line: int | None = None
    ) -> str:
        try:
            data = self.view.read_file(self._target(target), path)
        except FileNotFoundError as exc:
            raise ToolError(str(exc)) from None
        # Numbered as git and editors count lines: at LF only (splitlines also cuts at form feeds).
        lines = [line.rstrip("\r\n") for line in split_lines(data.decode("utf-8", "replace"))]
        end = min(len(lines), end_line or len(lines))
        if start_line > max(1, len(lines)):
            raise ToolError(f"{path} has {len(lines)} lines")
        numbered = "\n".join(f"{n:>5}  {lines[n - 1]}" for n in range(start_line, end + 1))
        return f"{target}: {path} lines {start_line}-{end} of {len(lines)}\n" + self._wrap(
            cap_lines(numbered, self.output_chars, first_line=start_line)
        )

    def _tool_search(
        self, target: str, pattern: str, path: str | None = None, include_vendored: bool = False
    ) -> str:
        try:
            hits = self.view.grep(self._target(target), pattern, path)
        except ValueError as exc:
            raise ToolError(f"search failed: {exc}") from None
        left_out = 0
        if not include_vendored and not (path and is_vendored(path)):  # a vendored `path` asks for them
            kept = [hit for hit in hits if not is_vendored(_hit_path(hit))]
            left_out, hits = len(hits) - len(kept), kept
        note = (
            f"; {left_out} match(es) in vendored paths left out (pass include_vendored=true)"
            if left_out
            else ""
        )
        return f"{target}: {len(hits)} matching line(s){note}\n" + self._wrap(
            cap_lines("\n".join(hits) or "(no match)", self.output_chars)
        )

    def _tool_run(self, command: str, targets: list[str] | None = None, timeout: float | None = None) -> str:
        left = self.sandbox_budget - self.sandbox_seconds
        if left < 1:
            raise ToolError(
                f"run is unavailable: the sandbox-time budget ({self.sandbox_budget:g}s, "
                f"--max-sandbox-seconds) is spent; the other tools still work"
            )
        labels = targets or [BASE, *self.candidates.order]
        contrast = [label for label in labels if label in self.candidates.contrast]
        if contrast:
            raise ToolError(f"failing trajectories cannot be run: {', '.join(contrast)}")
        ids = {label: self._target(label) for label in labels}
        sandbox = self._open_sandbox()
        tests = command.strip() == "tests"
        at_once = sandbox.commands_at_once or len(ids)
        each = run_timeout(timeout, tests, left, len(ids), at_once)
        started = time.monotonic()
        try:
            if tests:
                if not sandbox.test_command:
                    raise ToolError("this task has no test command; give a shell command")
                command = sandbox.test_command
            results = sandbox.exec_many(list(ids.values()), command, timeout=each)
            blocks = [f"[environment: {sandbox.environment_note}]"] if sandbox.environment_note else []
            if not self._sandbox_described:
                self._sandbox_described = True
                blocks.append(f"[sandbox, said once: {describe_sandbox(sandbox, next(iter(ids.values())))}]")
        except SandboxError as exc:
            raise ToolError(f"run failed: {exc}") from None
        finally:
            self.sandbox_seconds += time.monotonic() - started
        same = same_failure([results[tid] for tid in ids.values()])
        if same:
            return "\n".join([*blocks, f"== all targets ({', '.join(labels)}): {same}"])
        cut = ""
        if each < run_timeout(timeout, tests, math.inf, 1, 1):  # what the budget did not cut
            cut = f" at {each:.0f}s, all the sandbox-time budget left for this run allowed"
        by_label = {label: results[tid] for label, tid in ids.items()}
        return "\n".join(blocks + render_targets(by_label, self.output_chars, self._wrap, cut))

    def _open_sandbox(self) -> Sandbox:
        if self._sandbox is None:
            if self._sandbox_error is not None or self._sandbox_opener is None:
                raise ToolError(f"run is unavailable: {self._sandbox_error or 'no sandbox configured'}")
            started = time.monotonic()
            self._sandbox_slots.acquire()
            self.waited += time.monotonic() - started
            started = time.monotonic()
            try:
                self._sandbox = self._sandbox_opener()
            except Exception as exc:  # any backend failure leaves the other tools working
                self._sandbox_slots.release()
                self.sandbox_failure = f"{type(exc).__name__}: {exc}"
                self._sandbox_error = getattr(exc, "reason", None) or self.sandbox_failure
                raise ToolError(
                    f"run is unavailable: {self._sandbox_error}; the other tools still work"
                ) from None
            finally:
                self.environment_seconds += time.monotonic() - started
        return self._sandbox


def paginate(text: str, size: int) -> list[str]:
    """`text` in pages of at most `size` characters that end at line ends (a line longer than a page is split
    across pages): no diff line is cut in two unless it alone is over a page.

    Args:
        text: the text; lines end at LF.
        size: the most characters a page holds (positive).

    Returns:
        The pages, which joined are `text`; one empty page for empty text.
    """
    pages: list[str] = []
    current = ""
    for line in split_lines(text):
        while len(line) > size:  # over a page by itself: whole pages of it
            if current:
                pages.append(current)
                current = ""
            pages.append(line[:size])
            line = line[size:]
        if len(current) + len(line) > size:
            pages.append(current)
            current = ""
        current += line
    if current or not pages:
        pages.append(current)
    return pages


def is_vendored(path: str) -> bool:
    """Whether a repository path lies in a vendored tree (a directory named in `VENDORED_DIRS`)."""
    return any(part in VENDORED_DIRS for part in path.split("/"))


def _hit_path(hit: str) -> str:
    """The path of a `path:line:text` search hit."""
    match = re.match(r"(.+?):\d+:", hit)
    return match.group(1) if match else hit


def injections_by_trajectory(view: GradingView) -> dict[str, list[str]]:
    """Injection attempts in each gradable trajectory's patch (its added lines, as submitted)."""
    found = {}
    for tid in view.gradable():
        hits = find_injections(view.patch(tid))
        if hits:
            found[tid] = hits
    return found


__all__ = [
    "Candidates",
    "Markers",
    "Submission",
    "ToolError",
    "Toolbox",
    "assign_labels",
    "compact_diff",
    "find_injections",
    "injections_by_trajectory",
    "offered_tools",
    "parse_arguments",
    "split_budget",
    "tool_schemas",
    "wrap",
]
