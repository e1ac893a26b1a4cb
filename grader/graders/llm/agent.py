"""The agentic grader: an LLM on an OpenAI-compatible endpoint inspects the candidates with tools, then ranks.

The loop is small on purpose: ask the model, run the tool calls it makes, feed the results back, until it
submits a valid ranking or a budget runs out. It knows tools only through `Toolbox.schemas()` and
`Toolbox.call()`. Every failure ends in `GradingFailed` with the reason (never a default ranking), so the
group passes through unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from grader.errors import GradingFailed
from grader.graders.base import Grade
from grader.graders.evidence.opening import opening_evidence
from grader.graders.llm.budgets import Budgets
from grader.graders.llm.config import LLMConfig
from grader.graders.llm.endpoint import (
    ContextOverflow,
    DeadlinePassed,
    Endpoint,
    EndpointFailed,
    Lesson,
    Reply,
    Traffic,
)
from grader.graders.llm.prompts import Prompts, load_prompts
from grader.graders.llm.tools import (
    MAX_RUN_TIMEOUT,
    SUBMIT,
    Markers,
    Submission,
    Toolbox,
    ToolError,
    assign_labels,
    injections_by_trajectory,
    wrap,
)
from grader.graders.transcript import Transcript
from grader.workspace.view import GradingView
from grader.workspace.workspace import ref_name

NUDGE = "Continue with the tools; finish by calling submit_ranking."
FORCE = "Call submit_ranking now, with every candidate label, a reason for each and your confidence."
FINAL = (
    "Call submit_ranking now: this is your last turn. Give every candidate ({labels}) its tie group in "
    "tiers: 1 for the best, 2 for the next, the same number for a tie; a one-sentence reason for each and "
    "your confidence from 0 to 1."
)
SILENT_TURNS_BEFORE_FORCING = 2
UNANSWERED = "no tool call when forced"
REPEATED = "only calls already answered"
"""Why a final turn follows a forced turn the model answered without any tool call: it will not inspect, so
what it can still do is submit (under "auto", which a server refusing "required" falls back to, Gemma 3 270M
on llama-cpp-python answered 21 forced turns in a row with an empty message)."""
CUT = "Your reply was cut at the limit of {limit} tokens a turn: keep replies and arguments shorter. "
CUT_AT_CONTEXT = "Your reply was cut where the model's context ends: keep replies and arguments shorter. "
"""Told for a reply cut with fewer tokens written than the turn allowed: llama-server reports `length` for a
reply the end of its context cut as for one the per-turn limit cut."""
CONTEXT = "context window"
"""Why the final turn comes when the conversation nears or passes the model's context."""
LEFT_OUT = "Your {count} earlier message(s) and their tool results were left out to fit the model's context. "


@dataclass
class _Usage(Traffic):
    """A grading's costs: the endpoint's traffic (requests, retries, slot waits) and what the turns used."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # served from the server's prefix cache, where it reports them
    completion_tokens: int = 0
    tool_calls: int = 0
    tool_output_chars: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, int]:
        counts = {k: v for k, v in self.__dict__.items() if k != "slot_wait"}
        return {**counts, "total_tokens": self.total_tokens}


def _text_tool_call(content: str | None) -> tuple[str, Any] | None:
    """A tool call written as JSON in the message text, for endpoints without function calling."""
    if not content:
        return None
    fenced = re.search(r"```(?:json)?\s*(\{.*?\})\s*```", content, flags=re.S)
    candidates = [fenced.group(1)] if fenced else []
    start = content.find("{")
    if start >= 0:
        candidates.append(content[start : content.rfind("}") + 1])
    for text in candidates:
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and isinstance(data.get("tool"), str):
            return data["tool"], data.get("arguments", {})
    return None


def _reply_format(toolbox: Toolbox, only_submit: bool, final: bool = False) -> dict[str, Any]:
    """A `response_format` that admits exactly one text-mode tool call, {"tool": name, "arguments": {...}},
    each tool's arguments under its own schema; only submit_ranking when the submission is forced (in the
    final turn's form, `Toolbox.final_schemas`, when `final`)."""
    schemas = toolbox.final_schemas() if final else toolbox.schemas()
    calls = [
        {
            "type": "object",
            "properties": {"tool": {"const": spec["name"]}, "arguments": spec["parameters"]},
            "required": ["tool", "arguments"],
            "additionalProperties": False,
        }
        for spec in (s["function"] for s in schemas)
        if not only_submit or spec["name"] == SUBMIT
    ]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": schema}}


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


def _call_key(name: str, arguments: Any) -> str:
    """A tool call as one comparable string: its name and its arguments, decoded where they are JSON."""
    if isinstance(arguments, str):
        with contextlib.suppress(json.JSONDecodeError):
            arguments = json.loads(arguments or "{}")
    return f"{name} {json.dumps(arguments, sort_keys=True)}"


def _cut_note(reply: Reply, limit: int) -> str:
    """What the next message tells the model of its reply, if the reply was cut: at the per-turn limit, or
    (fewer tokens written than the `limit` the turn allowed, where the server reports its usage) where the
    model's context ends; "" for a reply that ended on its own."""
    if reply.finish_reason != "length":
        return ""
    written = (reply.usage or {}).get("completion_tokens")
    return CUT_AT_CONTEXT if isinstance(written, int) and written < limit else CUT.format(limit=limit)


def _arguments_text(arguments: Any) -> str:
    """A tool call's arguments as the JSON string the chat format expects in the history (some servers send
    an object). Arguments that are not a JSON object (a reply cut mid-call) go back as one that holds their
    text, {"invalid_json": ...}: llama-server parses every call of the history and answers HTTP 500 "Failed to
    parse tool call arguments as JSON" to each later turn otherwise (a default-options grading failed so when
    Gemma 3 270M's reply was cut at the turn limit inside a call). The call's result says what was wrong."""
    if not isinstance(arguments, str):
        return json.dumps(arguments)
    try:
        parsed = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        parsed = None
    return arguments if isinstance(parsed, dict) else json.dumps({"invalid_json": arguments})


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
        """Grade one group with the model; see `Grader.grade`. Raises GradingFailed with the reason."""
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
        )
        usage = _Usage()
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
        try:
            transcript.event(
                "start",
                group_id=group_id,
                model=self.config.model,
                seed=seed,
                labels=candidates.members,
                contrast=candidates.contrast,
                tool_mode=self.config.tool_mode,
            )
            if known:  # what earlier gradings learnt of the server shapes this one's requests: say so too
                transcript.event("endpoint", learnt=[lesson.as_dict() for lesson in known])
            for tid, hits in flags.items():
                transcript.event("flag", flag="injection", trajectory=tid, lines=hits)
            submission = self._loop(toolbox, candidates.order, view, transcript, usage, details)
        except GradingFailed as exc:
            _note_lessons(details, known, transcript)
            transcript.event("failed", reason=str(exc), usage=usage.as_dict())
            exc.details, exc.usage, exc.flags = details, usage.as_dict(), flags
            exc.transcript = str(path) if path else None
            raise
        finally:
            toolbox.close()
            transcript.close()
        _note_lessons(details, known, transcript)
        signals = {tid: {"injection": hits} for tid, hits in flags.items()}
        for tid in view.gradable():
            signals.setdefault(tid, {})["confidence"] = submission.confidence
        return Grade(
            ranking=submission.ranking,
            rationales=submission.reasons,
            signals=signals,
            usage=usage.as_dict(),
            transcript=str(path) if path else None,
            flags=flags,
            details={**details, "confidence": submission.confidence, "ranking_labels": submission.labels},
        )

    # -- the loop ----------------------------------------------------------------------------------------

    def _loop(
        self,
        toolbox: Toolbox,
        labels: list[str],
        view: GradingView,
        transcript: Transcript,
        usage: _Usage,
        details: dict[str, Any],
    ) -> Submission:
        """Turns until the model submits a valid ranking; a forced final turn is recorded in `details`
        ("final_turn": its number and the budget that called for it). A request the server refuses for not
        fitting the model's context is sent again as the final turn, its oldest turns left out
        (`_shortened`).

        Raises:
            GradingFailed: a budget ran out first, or the endpoint failed (the reason says which).
        """
        budgets = self.config.budgets
        began = time.monotonic()

        def deadline() -> float:  # waits for shared slots are not the grading's time
            return began + budgets.wall_seconds + usage.slot_wait + toolbox.waited

        native = self.config.tool_mode == "native"
        messages = self._opening(toolbox, labels, view, native)
        for message in messages:
            transcript.event("message", role=message["role"], content=message["content"])
        repairs = 0

        def invalid_ranking(problem: str, call_id: str | None) -> None:
            """Count a repair of an invalid (or missing) ranking; fail the grading once they run out."""
            nonlocal repairs
            repairs += 1
            transcript.event("invalid_ranking", call_id=call_id, problem=problem, repair=repairs)
            if repairs > budgets.repairs:
                raise GradingFailed(f"no valid ranking after {budgets.repairs} repairs: {problem}") from None

        silent = 0  # consecutive answers without a tool call
        forcing = False
        final: str | None = None  # why the submission is forced with submit_ranking alone, once it is
        stalled: str | None = None  # UNANSWERED or REPEATED once the model stops making progress
        # An answer without a tool call is answered in the next turn's user message (cut note, reminder),
        # which an instruction to submit replaces: one user turn, as templates that alternate want.
        pending: tuple[str, str] | None = None
        answered: set[str] = set()  # the calls made so far (name and arguments)
        slowest = 0.0  # the longest turn so far (request and tools), to tell when the wall budget is near
        last_prompt = 0  # prompt tokens of the latest request: the least the next one costs
        growth = 0  # what the latest turn added to the prompt: about what the next one adds
        turn_began: float | None = None
        for turn in range(1, budgets.turns + 1):
            now = time.monotonic()
            if turn_began is not None:
                slowest = max(slowest, now - turn_began)
            turn_began = now
            why = (
                final
                or stalled
                or self._last_turn(turn, usage, last_prompt, growth, deadline() - now, slowest)
            )
            asked_at = len(messages)  # where this turn's user message goes, if it has one
            if final is None and why is not None:
                # The last turn the budgets leave: submit_ranking alone is offered, and required (a server
                # that refuses "required" is sent it named instead), so the grading ends in the model's own
                # ranking, validated as ever, rather than on a budget.
                final, forcing = why, True
                details["final_turn"] = {"turn": turn, "why": why}
                text = (pending[0] if pending else "") + FINAL.format(labels=", ".join(labels))
                messages.append({"role": "user", "content": text})
                transcript.event("message", role="user", content=text, forced="final", why=why)
            elif not forcing and silent >= SILENT_TURNS_BEFORE_FORCING:
                # Force a tool call: `required` (what llama.cpp, vLLM and OpenAI all take; in structured
                # text mode, a schema of submit_ranking alone) plus an appended instruction; the tool list
                # stays as it was, so the history stays append-only.
                forcing = True
                text = (pending[0] if pending else "") + FORCE
                messages.append({"role": "user", "content": text})
                transcript.event("message", role="user", content=text, forced=True)
            elif pending:
                messages.append({"role": "user", "content": pending[0] + pending[1]})
                transcript.event("message", role="user", content=pending[0] + pending[1])
            pending = None
            if usage.total_tokens >= budgets.tokens:
                raise GradingFailed(f"token budget exhausted ({usage.total_tokens:,} >= {budgets.tokens:,})")
            if usage.tool_output_chars >= budgets.tool_output_chars:
                raise GradingFailed(f"tool output budget exhausted ({usage.tool_output_chars:,} characters)")
            choice = "required" if forcing else "auto"
            prompt_before = usage.prompt_tokens
            only = final is not None
            limit = self._max_tokens(usage)
            while True:
                try:
                    reply = self._complete(
                        messages, toolbox, native, deadline(), transcript, usage, limit, choice, only
                    )
                    break
                except ContextOverflow as overflow:
                    # The final turn, on what still fits: submit_ranking alone, on the opening and the most
                    # recent turns (the model can still rank on what it saw last rather than fail the group).
                    messages = self._shortened(messages, asked_at, overflow, labels, transcript)
                    asked_at = len(messages) - 1
                    if final is None:
                        final, forcing, choice, only = CONTEXT, True, "required", True
                        details["final_turn"] = {"turn": turn, "why": CONTEXT}
            growth = max(0, usage.prompt_tokens - prompt_before - last_prompt)
            last_prompt = usage.prompt_tokens - prompt_before
            calls = self._calls(reply, native, toolbox.markers)
            # Results of calls written as text (a response_format in native mode) go back as user turns: a
            # tool message would answer a call the history does not have.
            native_calls = native and bool(reply.tool_calls)
            assistant: dict[str, Any] = {"role": "assistant", "content": reply.content or ""}
            if native and reply.tool_calls:
                assistant["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": _arguments_text(c.arguments)},
                    }
                    for c in reply.tool_calls
                ]
            messages.append(assistant)
            transcript.event(
                "message",
                role="assistant",
                turn=turn,
                content=reply.content,
                tool_calls=[{"id": cid, "name": n, "arguments": a} for cid, n, a in calls],
            )
            silent = 0 if calls else silent + 1
            made = {_call_key(name, arguments) for _, name, arguments in calls}
            if calls and final is None and made <= answered:
                # Every call repeats one already answered: its results are in the history, and a model at
                # temperature 0 that loops on them will not stop (Gemma 3 270M echoing its prompt on
                # llama-server made the same seven calls each turn). What it can still do is submit.
                stalled = REPEATED
            answered |= made
            # A cut reply: say so, so the model answers shorter rather than repeating itself.
            cut = _cut_note(reply, limit)
            cut_aside = f" ({cut.strip()})" if cut else ""
            if not calls:
                if final is not None:
                    # The final turn offers nothing but the submission: a reply without it is a failed one,
                    # and asking again is a repair like any invalid ranking (at temperature 0 a reply cut at
                    # the turn limit comes back the same: Gemma 3 270M spent 20 turns so).
                    invalid_ranking("no submit_ranking call in the final turn" + cut_aside, None)
                if forcing:
                    stalled = UNANSWERED
                pending = (cut, FORCE if forcing else NUDGE)
                continue
            for call_id, name, arguments in calls:
                usage.tool_calls += 1
                started = time.monotonic()
                if name == SUBMIT:
                    try:
                        submission = toolbox.submission(arguments)
                    except ToolError as exc:
                        invalid_ranking(str(exc), call_id)
                        output = f"error: {exc}{cut_aside}"
                        self._reply(messages, transcript, call_id, name, output, native_calls, started, True)
                        continue
                    transcript.event(
                        "submitted",
                        call_id=call_id,
                        ranking=submission.labels,
                        confidence=submission.confidence,
                        usage=usage.as_dict(),
                        final=final,
                    )
                    return submission
                try:
                    output, is_error = toolbox.call(name, arguments), False
                except ToolError as exc:
                    output, is_error = f"error: {exc}{cut_aside}", True
                usage.tool_output_chars += len(output)
                self._reply(messages, transcript, call_id, name, output, native_calls, started, is_error)
            if time.monotonic() > deadline():
                raise GradingFailed(f"wall-time budget exhausted ({budgets.wall_seconds:g}s)")
        raise GradingFailed(f"turn budget exhausted ({budgets.turns} turns) without a valid ranking")

    @staticmethod
    def _shortened(
        messages: list[dict],
        asked_at: int,
        overflow: ContextOverflow,
        labels: list[str],
        transcript: Transcript,
    ) -> list[dict]:
        """The conversation as the final turn sends it after `overflow`: the opening (system prompt and task),
        the later half of the turns before `asked_at` (each turn an assistant message and what answered it),
        and a last user message that says what was left out and asks for the ranking. The transcript gets a
        "left_out" event with the slices of `messages` dropped, so the conversation the model saw can be
        rebuilt from it (`grader.distill.sft`).

        Raises:
            GradingFailed: nothing is left to leave out (the overflow's reason).
        """
        opening = 2
        starts = [i for i in range(opening, asked_at) if messages[i]["role"] == "assistant"]
        if asked_at > opening and (not starts or starts[0] != opening):
            starts.insert(0, opening)  # a user message before the first reply (an earlier final turn's)
        if not starts:
            raise GradingFailed(str(overflow))
        kept_from = starts[(len(starts) + 1) // 2] if len(starts) > 1 else asked_at
        slices = [[opening, kept_from], [asked_at, len(messages)]]
        slices = [s for s in slices if s[1] > s[0]]
        dropped = kept_from - opening
        transcript.event(
            "left_out",
            slices=slices,
            reason=str(overflow),
            context_tokens=overflow.limit,
            prompt_tokens=overflow.prompt_tokens,
        )
        text = LEFT_OUT.format(count=dropped) + FINAL.format(labels=", ".join(labels))
        shortened = messages[:opening] + messages[kept_from:asked_at] + [{"role": "user", "content": text}]
        transcript.event("message", role="user", content=text, forced="final", why=CONTEXT)
        return shortened

    def _opening(self, toolbox: Toolbox, labels: list[str], view: GradingView, native: bool) -> list[dict]:
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
        task = self.prompts.task.format(
            statement=wrap(view.task.statement or "(no statement given)", toolbox.markers),
            labels=", ".join(labels),
            contrast=contrast,
            tools=", ".join(toolbox.names()),
        )
        evidence = opening_evidence(view, toolbox.candidates.members, self.config.sandbox)
        if evidence:  # what gagar already ran, so the model's turns go to what differs (issue 38)
            task += "\n\n" + wrap(evidence, toolbox.markers)
        return [{"role": "system", "content": system}, {"role": "user", "content": task}]

    @staticmethod
    def _calls(reply: Reply, native: bool, markers: Markers) -> list[tuple[str, str, Any]]:
        if native and reply.tool_calls:
            return [(c.id, c.name, c.arguments) for c in reply.tool_calls]
        parsed = _text_tool_call(reply.content)
        if parsed is not None:
            return [(f"text-{markers()[:6]}", parsed[0], parsed[1])]
        return []

    @staticmethod
    def _reply(
        messages: list[dict],
        transcript: Transcript,
        call_id: str,
        name: str,
        output: str,
        native: bool,
        started: float,
        is_error: bool,
    ) -> None:
        if native:
            messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        else:
            messages.append({"role": "user", "content": f"Result of {name}:\n{output}"})
        transcript.event(
            "tool_result",
            call_id=call_id,
            name=name,
            content=output,
            error=is_error,
            seconds=round(time.monotonic() - started, 4),
        )

    def _complete(
        self,
        messages: list[dict],
        toolbox: Toolbox,
        native: bool,
        deadline: float,
        transcript: Transcript,
        usage: _Usage,
        max_tokens: int,
        tool_choice: str = "auto",
        only_submit: bool = False,
    ) -> Reply:
        """The model's reply to the conversation, its usage counted (estimated where the server reported
        none, so the token budget still binds). `max_tokens`: what the reply may generate. `only_submit`:
        submit_ranking is the one tool offered, under `tool_choice` "required", and the one call a
        `response_format` admits (in any mode): llama-server reads "required" as a call at the end of the
        reply, after any text, so a base model that echoes its prompt never reaches it, while a
        `response_format` holds the reply to the JSON call from its first token (a text call, which the loop
        parses in native mode too).

        Raises:
            GradingFailed: the wall budget ran out, or the endpoint gave no reply (the reason says which).
            ContextOverflow: the conversation does not fit the model's context.
        """
        budgets = self.config.budgets
        if deadline - time.monotonic() <= 0:
            raise GradingFailed(f"wall-time budget exhausted ({budgets.wall_seconds:g}s)")
        structured = not native and self.config.structured
        started = time.monotonic()
        try:
            # Explicit tool_choice: OpenAI reads a missing one as "auto", llama.cpp's Python server as "none".
            tools = toolbox.final_schemas() if only_submit else toolbox.schemas()
            reply = self.endpoint.complete(
                messages,
                tools=tools if native else None,
                tool_choice=tool_choice if native else None,
                response_format=_reply_format(toolbox, only_submit or tool_choice == "required", only_submit)
                if structured or only_submit
                else None,
                max_tokens=max_tokens,
                deadline=deadline,
                traffic=usage,
                note=transcript.event,
                slot=toolbox.view.resources.llm,
            )
        except DeadlinePassed:
            raise GradingFailed(f"wall-time budget exhausted ({budgets.wall_seconds:g}s)") from None
        except ContextOverflow:
            raise  # the loop shortens the conversation
        except EndpointFailed as exc:
            raise GradingFailed(str(exc)) from None
        reported = reply.usage
        if reported is not None:
            usage.prompt_tokens += reported.get("prompt_tokens") or 0
            usage.completion_tokens += reported.get("completion_tokens") or 0
            usage.cached_prompt_tokens += reply.cached_tokens
        else:  # some servers omit usage: estimate, so the token budget still binds
            usage.prompt_tokens += len(json.dumps(messages)) // 4
            written = (reply.content or "") + "".join(
                c.name + _arguments_text(c.arguments) for c in reply.tool_calls
            )
            usage.completion_tokens += len(written) // 4
        transcript.event(
            "response",
            seconds=round(time.monotonic() - started, 4),
            finish_reason=reply.finish_reason,
            usage=reported,
        )
        return reply

    # -- helpers -----------------------------------------------------------------------------------------

    def _last_turn(
        self, turn: int, usage: _Usage, last_prompt: int, growth: int, seconds_left: float, slowest: float
    ) -> str | None:
        """Which budget makes this turn the last one that surely fits, if one does: the turns; the tokens
        (another turn costs at least the conversation again plus a reply); the model's context, once an
        overflow on this endpoint named it (two more turns like the last one and a reply would not fit);
        the wall time (less than two of the slowest turns so far left)."""
        budgets = self.config.budgets
        if turn >= budgets.turns:
            return "turn budget"
        if budgets.tokens - usage.total_tokens < 2 * (last_prompt + budgets.max_output_tokens):
            return "token budget"
        context = self.endpoint.context_tokens
        if context is not None and last_prompt + 2 * growth + budgets.max_output_tokens > context:
            return CONTEXT
        if slowest > 0 and seconds_left < 2 * slowest:
            return "wall-time budget"
        return None

    def _max_tokens(self, usage: _Usage) -> int:
        """Tokens one turn may generate: the per-turn cap, and never past what the token budget has left, so
        a request the loop abandons cannot keep a server generating for long."""
        left = self.config.budgets.tokens - usage.total_tokens
        return max(1, min(self.config.budgets.max_output_tokens, left))

    def fingerprint(self) -> str:
        """What changes this grader's grades: model, prompts, tools mode, sampling, budgets, sandbox."""
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

            # The container outlives the grading's wall budget by one run at most, then ends by itself.
            slack = MAX_RUN_TIMEOUT + Limits().command_bound
            limits = Limits(lifetime=self.config.budgets.wall_seconds + slack)
            # A failed environment build surfaces as `run is unavailable: <reason>`.
            return open_task_sandbox(view, backend, limits)

        return opener


__all__ = ["Budgets", "LLMConfig", "LLMGrader"]


ALL_PASS_CLAIM = re.compile(r"Every\s+candidate\s+below\s+already\s+passes\s+the\s+task's\s+tests\.")
"""The shipped system prompt's claim (prompts/system.md), across its line breaks."""
MAY_FAIL = (
    "Some candidates below may not fix the task: they were not all checked against its tests. A candidate "
    "that does not solve the task as stated ranks below every one that does."
)


def candidates_may_fail(system: str) -> str:
    """The system prompt without its claim that every candidate passes the tests, saying instead that some
    may not fix the task (the note is appended when a custom prompt words the claim otherwise)."""
    if ALL_PASS_CLAIM.search(system):
        return ALL_PASS_CLAIM.sub(MAY_FAIL, system, count=1)
    return system + "\n\n" + MAY_FAIL
