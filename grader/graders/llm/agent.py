"""The agentic grader: an LLM on an OpenAI-compatible endpoint inspects the candidates with tools, then ranks.

`LLMGrader.grade` sets a grading up (labels, tools, transcript, the opening messages of `_opening`) and runs
the loop (`grader.graders.llm.loop`): ask the model, run the tool calls it makes, feed the results back,
until it submits a valid ranking or a budget runs out. Every failure ends in `GradingFailed` with the reason
(never a default ranking), so the group passes through unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from grader.errors import GradingFailed
from grader.graders.base import Grade
from grader.graders.evidence.opening import opening_evidence
from grader.graders.evidence.run import CACHE_VERSION as EVIDENCE_VERSION
from grader.graders.llm.budgets import Budgets
from grader.graders.llm.config import LLMConfig
from grader.graders.llm.endpoint import Endpoint, Lesson
from grader.graders.llm.loop import AgentLoop, LoopState, Usage
from grader.graders.llm.prompts import Prompts, load_prompts
from grader.graders.llm.runs import MAX_RUN_TIMEOUT, describe_environment
from grader.graders.llm.tools import (
    Markers,
    Submission,
    Toolbox,
    assign_labels,
    injections_by_trajectory,
    wrap,
)
from grader.graders.transcript import Transcript
from grader.workspace.view import GradingView
from grader.workspace.workspace import ref_name


def _failure(exc: Exception) -> GradingFailed:
    """The GradingFailed a grading ends with for `exc`: itself, or one naming any other exception (a bug, a
    bad prompt file, a transcript that cannot be written), chained to it, so the failure still carries the
    usage, details and transcript (the pipeline's catch-all keeps none of them)."""
    if isinstance(exc, GradingFailed):
        return exc
    failure = GradingFailed(f"{type(exc).__name__}: {exc}")
    failure.__cause__ = exc
    return failure


def _quietly(write: Callable[..., Any], *args: Any, **fields: Any) -> None:
    """A transcript event that must not replace the outcome it records: an unwritable transcript (a full
    disk) loses the event, not the grading's result."""
    with contextlib.suppress(OSError, ValueError):
        write(*args, **fields)


def _close(toolbox: Toolbox, transcript: Transcript, details: dict[str, Any]) -> bool:
    """Close the grading's sandbox and transcript; neither failing replaces the grading's outcome (a container
    the engine did not remove in time after a long `run` ended such gradings with no ranking and no
    transcript). What failed is said in `details` ("sandbox_close", "transcript_error") and the transcript.

    Returns:
        Whether the transcript was written to its path.
    """
    try:
        toolbox.close()
    except Exception as exc:  # noqa: BLE001 - the sandbox ends by itself at its lifetime; the result stands
        details["sandbox_close"] = f"{type(exc).__name__}: {exc}"
        _quietly(transcript.event, "sandbox_close_failed", error=details["sandbox_close"])
    try:
        transcript.close()
    except OSError as exc:
        details["transcript_error"] = f"{type(exc).__name__}: {exc}"
        return False
    return transcript.path is not None


def _note_lessons(details: dict[str, Any], known: list[Lesson], transcript: Transcript) -> None:
    """Puts what the endpoint had refused (before this grading or during it) into the grading's details, as
    `gagar show` prints it; nothing when it refused nothing."""
    lessons = [str(lesson) for lesson in known]
    for event in transcript.events:
        if event["type"] == "learnt":
            fields = {k: event[k] for k in ("option", "refused", "instead", "cause")}
            lessons.append(str(Lesson(**fields)))
    if lessons:
        details["endpoint"] = list(dict.fromkeys(lessons))


class LLMGrader:
    """Grades a group with an LLM agent (options: the fields of `LLMConfig`). Thread-safe: each `grade`
    call has its own state. Raises ValueError for an option `LLMConfig` does not have."""

    name = "llm"

    def __init__(self, model: str, **options: Any) -> None:
        self.config = LLMConfig(model=model, **options)
        self.prompts: Prompts = load_prompts(self.config.prompts_dir)
        key = self.config.api_key or os.environ.get(self.config.api_key_env) or "EMPTY"  # vLLM takes any key
        # One endpoint for all of this grader's gradings: one connection pool, and what the server refused
        # learnt once.
        self.endpoint = Endpoint(
            self.config.model,
            self.config.base_url,
            key,
            temperature=self.config.temperature,
            stream=self.config.stream,
            budgets=self.config.budgets,
        )

    def grade(self, view: GradingView) -> Grade:
        """Grade one group with the model; see `Grader.grade`.

        Every way out is a Grade or a GradingFailed whose reason names the budget or the error (any
        exception in the grading becomes one, with the usage, details and transcript known so far); the
        transcript ends with "submitted" or "failed". A sandbox or transcript that fails to close loses
        neither (`_close`).

        Raises:
            GradingFailed: the grading's failure, with the reason and what is known so far.
        """
        group_id = view.group_id
        seed = self._seed(group_id)
        path = None
        if self.config.transcript_dir is not None:
            path = Path(self.config.transcript_dir) / f"{ref_name(group_id)}.jsonl"
        candidates = assign_labels(view, seed, self.config.show_failing)
        secret = self.config.secret
        markers = Markers(f"{secret}:{group_id}:{seed}" if secret is not None else None)
        toolbox = Toolbox(
            view,
            candidates,
            self.prompts.tools,
            sandbox_opener=self._sandbox_opener(view),
            markers=markers,
            reply_tokens=self.config.budgets.max_output_tokens,
            sandbox_budget=self.config.budgets.sandbox_seconds,
        )
        usage = Usage()
        flags = injections_by_trajectory(view)
        details: dict[str, Any] = {
            "model": self.config.model,
            "seed": seed,
            "labels": candidates.members,
            "shown": candidates.order,
            "contrast": candidates.contrast,
        }
        known = self.endpoint.lessons
        # Opened last and closed in `finally`: a temporary file left open would wait for the collector.
        transcript = Transcript(path)
        failure: GradingFailed | None = None
        try:
            try:
                submission = self._converse(view, toolbox, transcript, usage, details, flags, known)
            except Exception as exc:  # noqa: BLE001 - every way out of a grading names its reason
                failure = _failure(exc)
                _note_lessons(details, known, transcript)
                _quietly(transcript.event, "failed", reason=str(failure), usage=usage.as_dict())
        finally:
            written = _close(toolbox, transcript, details)
        where = str(path) if path is not None and written else None
        if failure is not None:
            failure.details, failure.usage, failure.flags, failure.transcript = (
                details,
                usage.as_dict(),
                flags,
                where,
            )
            raise failure
        _note_lessons(details, known, transcript)
        signals = {tid: {"injection": hits} for tid, hits in flags.items()}
        for tid in view.gradable():
            signals.setdefault(tid, {})["confidence"] = submission.confidence
        return Grade(
            ranking=submission.ranking,
            rationales=submission.reasons,
            signals=signals,
            usage=usage.as_dict(),
            transcript=where,
            flags=flags,
            details={**details, "confidence": submission.confidence, "ranking_labels": submission.labels},
        )

    def _converse(
        self,
        view: GradingView,
        toolbox: Toolbox,
        transcript: Transcript,
        usage: Usage,
        details: dict[str, Any],
        flags: dict[str, list[str]],
        known: list[Lesson],
    ) -> Submission:
        """The grading's transcript opening (start, what the endpoint learnt before, flags, the opening
        messages), then the loop. Raises what the loop raises (GradingFailed with the reason)."""
        candidates = toolbox.candidates
        transcript.event(
            "start",
            group_id=view.group_id,
            model=self.config.model,
            seed=candidates.seed,
            labels=candidates.members,
            contrast=candidates.contrast,
            tool_mode=self.config.tool_mode,
        )
        if known:  # what earlier gradings learnt of the server shapes this one's requests: say so too
            transcript.event("endpoint", learnt=[lesson.as_dict() for lesson in known])
        for tid, hits in flags.items():
            transcript.event("flag", flag="injection", trajectory=tid, lines=hits)
        native = self.config.tool_mode == "native"
        opened = time.monotonic()
        messages = self._opening(toolbox, candidates.order, view, native)
        # Before the clock starts: the stage runs the candidates in the sandbox under its own budget, and
        # the usage shows what it took beside `run`'s seconds.
        usage.evidence_seconds = round(time.monotonic() - opened)
        for message in messages:
            transcript.event("message", role=message["role"], content=message["content"])
        state = LoopState(messages, candidates.order, usage, details, began=time.monotonic())
        return AgentLoop(self.config, self.endpoint, toolbox, transcript, state).run()

    def _opening(self, toolbox: Toolbox, labels: list[str], view: GradingView, native: bool) -> list[dict]:
        """The conversation's first two messages, built here alone: the system prompt (the claim that every
        candidate passes replaced under `candidates_may_fail`; the tools described in text mode) and the
        task (statement as data, labels, contrast, tools, and what `run`'s sandbox holds, said before any
        `run`: `runs.describe_environment`).

        Args:
            toolbox: the grading's tools (names, specs, labels, markers).
            labels: the candidate labels in the order shown.
            view: the group's view (its task statement).
            native: native function calling (else the tools are described in the system prompt).

        Returns:
            [system message, user message].

        Raises:
            ValueError: the task prompt (a `--prompts` override) names a field the grader does not fill.
        """
        system = self.prompts.system
        if self.config.candidates_may_fail:
            system = candidates_may_fail(system)
        if not native:
            described = "\n".join(
                f"- {s['name']}: {s['description']}\n  arguments: {json.dumps(s['parameters'])}"
                for s in toolbox.specs.values()
            )
            system += "\n\n" + self.prompts.no_tools.replace("{tools}", described)
        contrast = ""
        if toolbox.candidates.contrast:
            contrast = (
                f"Failing trajectories shown for contrast (not to be ranked): "
                f"{', '.join(toolbox.candidates.contrast)}\n"
            )
        backend = self.config.sandbox if "run" in toolbox.specs else None
        fields = {
            "statement": wrap(view.task.statement or "(no statement given)", toolbox.markers),
            "labels": ", ".join(labels),
            "contrast": contrast,
            "tools": ", ".join(toolbox.names()),
            "environment": describe_environment(view.task, backend),
        }
        try:
            task = self.prompts.task.format(**fields)
        except (KeyError, IndexError, ValueError) as exc:
            known = ", ".join(f"{{{name}}}" for name in fields)
            raise ValueError(
                f"the prompt file task.md cannot be filled in ({type(exc).__name__}: {exc}): it may name "
                f"{known}, and a literal brace is written twice"
            ) from None
        evidence = opening_evidence(view, toolbox.candidates.members, self.config.sandbox)
        if evidence:  # what gagar already ran, so the model's turns go to what differs (issue 38)
            task += "\n\n" + wrap(evidence, toolbox.markers)
        return [{"role": "system", "content": system}, {"role": "user", "content": task}]

    def fingerprint(self) -> str:
        """What changes this grader's grades: model, prompts, tools mode, sampling, budgets, sandbox, the
        evidence stage's version (its table opens the conversation)."""
        c = self.config
        prompts = hashlib.sha256(json.dumps(asdict(self.prompts), sort_keys=True).encode()).hexdigest()[:16]
        parts = [
            self.name,
            c.model,
            c.base_url or "",
            c.tool_mode + ("+structured" if c.structured else ""),
            f"{c.temperature:g}",
            prompts,
            str(c.seed),
            hashlib.sha256(c.secret.encode()).hexdigest()[:8] if c.secret is not None else "",
            str(c.sandbox),
            str(c.show_failing) + ("+may-fail" if c.candidates_may_fail else ""),
            json.dumps(asdict(c.budgets), sort_keys=True),
            f"evidence-{EVIDENCE_VERSION}",  # the opening's evidence table: a new stage, new grades
        ]
        return "|".join(parts)

    def _seed(self, group_id: str) -> int:
        secret = self.config.secret
        if secret is not None:  # reproducible from the run: (secret, group, sample) -> labels and order
            digest = hashlib.sha256(f"{secret}:{group_id}:{self.config.seed}".encode()).digest()
            return int.from_bytes(digest[:4], "big")
        if self.config.seed is None:
            return secrets.randbits(32)
        digest = hashlib.sha256(f"{self.config.seed}:{group_id}".encode()).digest()
        return int.from_bytes(digest[:4], "big")

    def _sandbox_opener(self, view: GradingView):
        backend = self.config.sandbox
        if backend is None:
            return None

        def opener():
            from grader.sandbox import Limits
            from grader.sandbox.environments import open_task_sandbox

            # The container outlives the grading's budgets by one run at most, then ends by itself.
            budgets = self.config.budgets
            slack = MAX_RUN_TIMEOUT + Limits().command_bound
            limits = Limits(lifetime=budgets.wall_seconds + budgets.sandbox_seconds + slack)
            # A failed environment build surfaces as `run is unavailable: <reason>`.
            return open_task_sandbox(view, backend, limits)

        return opener


__all__ = ["Budgets", "LLMConfig", "LLMGrader"]


ALL_PASS_CLAIM = re.compile(r"Every\s+candidate\s+below\s+already\s+passes\s+the\s+task's\s+tests\.")
"""The shipped system prompt's claim (prompts/system.md), across its line breaks."""
PASSING_IS_NECESSARY = re.compile(r"Passing\s+tests\s+is\s+necessary,\s+not\s+sufficient:")
"""The shipped system prompt's first criterion, which takes passing as given."""
MAY_FAIL = (
    "Whether each candidate passes the task's tests is not known: some may not fix the task, and some may "
    "break tests that passed before the change. A candidate that does not solve the task as stated ranks "
    "below every one that does; where `run` is offered, `run` with the command `tests` runs the task's tests."
)
PASSING_NOT_KNOWN = "Passing the tests (not known here: check it) is necessary, not sufficient:"


def candidates_may_fail(system: str) -> str:
    """The system prompt as it is for candidates whose test results are not known (a verification benchmark
    marks resolved and unresolved patches alike as passing): its claim that every candidate passes replaced
    by what is known (`MAY_FAIL`, appended when a custom prompt words the claim otherwise), and its first
    criterion no longer taking passing as given.

    Args:
        system: the system prompt.

    Returns:
        The prompt, changed.
    """
    if ALL_PASS_CLAIM.search(system):
        system = ALL_PASS_CLAIM.sub(MAY_FAIL, system, count=1)
    else:
        system += "\n\n" + MAY_FAIL
    return PASSING_IS_NECESSARY.sub(PASSING_NOT_KNOWN, system, count=1)
