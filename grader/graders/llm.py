"""The agentic grader: an LLM on an OpenAI-compatible endpoint inspects the candidates with tools, then ranks.

The loop is small on purpose: ask the model, run the tool calls it makes, feed the results back, until it
submits a valid ranking or a budget runs out. It knows tools only through `Toolbox.schemas()` and
`Toolbox.call()`. Every failure ends in `GradingFailed` with the reason (never a default ranking), so the
group passes through unchanged.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import secrets
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import openai
from openai import Stream
from openai.types.chat import ChatCompletion
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

from grader.errors import GradingFailed
from grader.graders.base import Grade
from grader.graders.budgets import Budgets
from grader.graders.llm_config import LLMConfig
from grader.graders.tools import (
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
from grader.prompts import Prompts, load_prompts
from grader.transcript import Transcript
from grader.view import GradingView
from grader.workspace import ref_name

RETRYABLE = (openai.RateLimitError, openai.APIConnectionError, openai.InternalServerError)
NUDGE = "Continue with the tools; finish by calling submit_ranking."
FORCE = "Call submit_ranking now, with every candidate label, a reason for each and your confidence."
SILENT_TURNS_BEFORE_FORCING = 2
CUT = "Your reply was cut at the limit of {limit} tokens a turn: keep replies and arguments shorter. "


@dataclass
class _Usage:
    requests: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # served from the server's prefix cache, where it reports them
    completion_tokens: int = 0
    tool_calls: int = 0
    tool_output_chars: int = 0
    slot_wait: float = 0.0  # seconds waiting for a shared LLM slot: not counted against the wall budget

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


def _names_tool_choice(exc: Exception) -> bool:
    """An HTTP error blaming the tool_choice (llama-cpp-python answers `required` with a 500)."""
    status = getattr(exc, "status_code", None)
    return status is not None and (400 <= status < 500 or status == 500) and "tool_choice" in str(exc)


_OVERFLOW = re.compile(
    r"exceed_context_size|exceeds the available context|maximum context length|context_length_exceeded"
    r"|context (length|window|size) (is )?exceeded|too many tokens|prompt is too long",
    re.IGNORECASE,
)


def _context_overflow(exc: Exception) -> str | None:
    """The reason to fail with when a server refused a request for not fitting the model's context, else None.

    llama.cpp answers 400 `exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`; vLLM 400 "This
    model's maximum context length is N tokens..."; OpenAI `context_length_exceeded`. The reason names the
    limit where the server gives it."""
    status = getattr(exc, "status_code", None)
    if status is None or not 400 <= status < 500 and status != 500:
        return None
    text = str(exc)
    if not _OVERFLOW.search(text):
        return None
    body = getattr(exc, "body", None)
    details = body if isinstance(body, dict) else {}
    if isinstance(details.get("error"), dict):
        details = details["error"]
    prompt, limit = details.get("n_prompt_tokens"), details.get("n_ctx")
    if limit is None:
        match = re.search(r"(?:maximum context length is|context size \(|context window of)\s*(\d+)", text)
        limit = int(match.group(1)) if match else None
    size = f" ({prompt:,} prompt tokens)" if isinstance(prompt, int) else ""
    bound = f"the model's context of {limit:,} tokens" if isinstance(limit, int) else "the model's context"
    return (
        f"context overflow: the conversation{size} no longer fits {bound}; give the server a larger context "
        f"or lower the tool output budget ({type(exc).__name__}: {text[:200]})"
    )


def _reply_format(toolbox: Toolbox, only_submit: bool) -> dict[str, Any]:
    """A `response_format` that admits exactly one text-mode tool call, {"tool": name, "arguments": {...}},
    each tool's arguments under its own schema; only submit_ranking when the submission is forced."""
    calls = [
        {
            "type": "object",
            "properties": {"tool": {"const": spec["name"]}, "arguments": spec["parameters"]},
            "required": ["tool", "arguments"],
            "additionalProperties": False,
        }
        for spec in (s["function"] for s in toolbox.schemas())
        if not only_submit or spec["name"] == SUBMIT
    ]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": schema}}


def _lines(response: Any) -> Iterator[str]:
    """The response body's lines (ended by LF, CRLF or CR, as server-sent events may be); a transport error
    mid-body (the server went away) raises `openai.APIConnectionError`, which is retried, as the same error
    before the body would be. Split here from the raw bytes: the HTTP library's line decoder cost more than
    the rest of reading a reply."""
    chunks = response.iter_bytes()
    pending = b""
    while True:
        try:
            chunk = next(chunks)
        except StopIteration:
            break
        except Exception as exc:  # the HTTP library's own errors, whichever one openai ships with
            message = f"the stream broke off: {type(exc).__name__}: {exc}"
            raise openai.APIConnectionError(message=message, request=response.request) from exc
        lines = (pending + chunk).splitlines(keepends=True)
        # A last line without its end waits for the next chunk (so does a lone CR, which may start a CRLF).
        pending = lines.pop() if lines and not lines[-1].endswith(b"\n") else b""
        for line in lines:
            yield line.rstrip(b"\r\n").decode("utf-8", "replace")
    if pending:
        yield pending.rstrip(b"\r\n").decode("utf-8", "replace")


class _ChunkStream(Stream[object]):
    """A completion's server-sent events, each the server's JSON object as parsed, read to the body's end.

    openai's synchronous `Stream` stops reading at "[DONE]" and closes the response, which on HTTP/1.1 also
    closes the connection, so every turn paid a new TCP connection (its `AsyncStream` drains the rest for
    this reason). Here the rest is read, and the connection goes back to the pool. Errors a server reports
    inside the stream raise `openai.APIError`, as openai's streams do; a body that breaks off raises
    `openai.APIConnectionError`.
    """

    def __stream__(self) -> Iterator[object]:
        response = self.response
        data: list[str] = []
        done = False
        try:
            for line in itertools.chain(_lines(response), [""]):  # "" ends a last event
                if line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
                    continue
                if line or not data:  # event:, id:, retry: and comments carry nothing a completion needs
                    continue
                payload, data = "\n".join(data), []
                if done or payload.startswith("[DONE]"):
                    done = True
                    continue
                chunk = json.loads(payload)
                if isinstance(chunk, dict) and chunk.get("error"):
                    error = chunk["error"]
                    message = error.get("message") if isinstance(error, dict) else None
                    raise openai.APIError(
                        message=message if isinstance(message, str) else "an error occurred during streaming",
                        request=response.request,
                        body=error,
                    )
                yield chunk
        finally:
            response.close()


def _assemble(chunks: Iterable[Any], deadline: float, wall_seconds: float) -> ChatCompletion:
    """The completion a stream of chunks adds up to: content, tool calls by index (arguments concatenated;
    an object given whole is kept), finish reason, usage and llama.cpp's timings.

    The chunks are the server's JSON objects as parsed (`_ChunkStream`): a real server sends one per
    generated token, and building the client's model for each cost more than the rest of a turn here.

    Raises:
        GradingFailed: the deadline passed before the last chunk (the caller closes the stream).
    """
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    head: dict[str, Any] = {}
    finish, usage, seen_choice = None, None, False
    for chunk in chunks:
        if time.monotonic() > deadline:
            raise GradingFailed(f"wall-time budget exhausted ({wall_seconds:g}s)")
        if not isinstance(chunk, dict):
            continue
        head = head or {"id": chunk.get("id") or "", "created": chunk.get("created") or 0}
        head.setdefault("model", chunk.get("model") or "")
        if chunk.get("timings"):
            head["timings"] = chunk["timings"]
        if isinstance(chunk.get("usage"), dict):
            usage = chunk["usage"]
        for choice in (chunk.get("choices") or [])[:1]:
            seen_choice = True
            finish = choice.get("finish_reason") or finish
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
            for piece in delta.get("tool_calls") or []:
                call = calls.setdefault(piece.get("index", 0), {"id": None, "name": "", "arguments": ""})
                call["id"] = piece.get("id") or call["id"]
                function = piece.get("function")
                if isinstance(function, dict):
                    call["name"] = call["name"] or function.get("name") or ""
                    arguments = function.get("arguments")
                    if isinstance(arguments, str):
                        call["arguments"] += arguments
                    elif arguments is not None:
                        call["arguments"] = json.dumps(arguments)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if calls:
        message["tool_calls"] = [
            {
                "id": call["id"] or f"call-{secrets.token_hex(4)}",
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]},
            }
            for _, call in sorted(calls.items())
        ]
    choices = [{"index": 0, "message": message, "finish_reason": finish or "stop"}] if seen_choice else []
    return ChatCompletion.construct(
        **{"object": "chat.completion", "id": "", "created": 0, "model": "", **head},
        choices=choices,
        usage=usage,
    )


def _arguments_text(arguments: Any) -> str:
    """A tool call's arguments as the JSON string the chat format expects in the history (some servers send
    an object)."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def _cached_tokens(response: Any) -> int:
    """Prompt tokens the server took from its prefix cache: OpenAI's and vLLM's (with
    `--enable-prompt-tokens-details`) `usage.prompt_tokens_details.cached_tokens`, else llama.cpp's
    `timings.cache_n`; 0 where neither is reported."""
    details = getattr(response.usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None)
    if cached is None:
        timings = (getattr(response, "model_extra", None) or {}).get("timings") or {}
        cached = timings.get("cache_n")
    return int(cached or 0)


class LLMGrader:
    """Grades a group with an LLM agent (options: the fields of `LLMConfig`). Thread-safe: each `grade`
    call has its own state. Raises ValueError for an option `LLMConfig` does not have."""

    name = "llm"

    def __init__(self, model: str, **options: Any) -> None:
        self.config = LLMConfig(model=model, **options)
        self.prompts: Prompts = load_prompts(self.config.prompts_dir)
        # tool_choice values this endpoint refused, learnt once per grader (shared by its gradings)
        self._refused_tool_choices: set[str] = set()
        key = (
            self.config.api_key or os.environ.get(self.config.api_key_env) or "EMPTY"
        )  # vLLM accepts any key
        self.client = openai.OpenAI(
            base_url=self.config.base_url,
            api_key=key,
            max_retries=0,
            timeout=self.config.budgets.request_timeout,
        )

    def grade(self, view: GradingView) -> Grade:
        """Grade one group with the model; see `Grader.grade`. Raises GradingFailed with the reason."""
        group_id = view.group_id
        seed = self._seed(group_id)
        path = None
        if self.config.transcript_dir is not None:
            path = Path(self.config.transcript_dir) / f"{ref_name(group_id)}.jsonl"
        transcript = Transcript(path)
        candidates = assign_labels(view, seed, self.config.show_failing)
        secret = self.config.secret
        markers = Markers(f"{secret}:{group_id}:{seed}" if secret is not None else None)
        toolbox = Toolbox(
            view, candidates, self.prompts.tools, sandbox_opener=self._sandbox_opener(view), markers=markers
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
        transcript.event(
            "start",
            group_id=group_id,
            model=self.config.model,
            seed=seed,
            labels=candidates.members,
            contrast=candidates.contrast,
            tool_mode=self.config.tool_mode,
        )
        for tid, hits in flags.items():
            transcript.event("flag", flag="injection", trajectory=tid, lines=hits)
        try:
            submission = self._loop(toolbox, candidates.order, view, transcript, usage)
        except GradingFailed as exc:
            transcript.event("failed", reason=str(exc), usage=usage.as_dict())
            exc.details, exc.usage, exc.flags = details, usage.as_dict(), flags
            exc.transcript = str(path) if path else None
            raise
        finally:
            toolbox.close()
            transcript.close()
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
        self, toolbox: Toolbox, labels: list[str], view: GradingView, transcript: Transcript, usage: _Usage
    ) -> Submission:
        budgets = self.config.budgets
        began = time.monotonic()

        def deadline() -> float:  # waits for shared slots are not the grading's time
            return began + budgets.wall_seconds + usage.slot_wait + toolbox.waited

        native = self.config.tool_mode == "native"
        messages = self._opening(toolbox, labels, view, native)
        for message in messages:
            transcript.event("message", role=message["role"], content=message["content"])
        repairs = 0
        silent = 0  # consecutive answers without a tool call
        forcing = False
        for turn in range(1, budgets.turns + 1):
            if not forcing and (silent >= SILENT_TURNS_BEFORE_FORCING or turn == budgets.turns):
                # Force the submission: `required` (what llama.cpp, vLLM and OpenAI all take; in structured
                # text mode, a schema of submit_ranking alone) plus an appended instruction; the tool list
                # stays as it was, so the history stays append-only.
                forcing = True
                messages.append({"role": "user", "content": FORCE})
                transcript.event("message", role="user", content=FORCE, forced=True)
            if usage.total_tokens >= budgets.tokens:
                raise GradingFailed(f"token budget exhausted ({usage.total_tokens:,} >= {budgets.tokens:,})")
            if usage.tool_output_chars >= budgets.tool_output_chars:
                raise GradingFailed(f"tool output budget exhausted ({usage.tool_output_chars:,} characters)")
            choice = "required" if forcing else "auto"
            response = self._complete(messages, toolbox, native, deadline(), transcript, usage, choice)
            message = response.choices[0].message
            calls = self._calls(message, native, toolbox.markers)
            assistant: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
            if native and message.tool_calls:
                assistant["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.function.name,
                            "arguments": _arguments_text(c.function.arguments),
                        },
                    }
                    for c in message.tool_calls
                ]
            messages.append(assistant)
            transcript.event(
                "message",
                role="assistant",
                turn=turn,
                content=message.content,
                tool_calls=[{"id": cid, "name": n, "arguments": a} for cid, n, a in calls],
            )
            silent = 0 if calls else silent + 1
            # Cut at the per-turn limit: say so, so the model answers shorter rather than repeating itself.
            cut = (
                CUT.format(limit=self._max_tokens(usage))
                if response.choices[0].finish_reason == "length"
                else ""
            )
            if not calls:
                reminder = cut + (FORCE if forcing else NUDGE)  # a user turn either way: templates alternate
                messages.append({"role": "user", "content": reminder})
                transcript.event("message", role="user", content=reminder)
                continue
            for call_id, name, arguments in calls:
                usage.tool_calls += 1
                started = time.monotonic()
                if name == SUBMIT:
                    try:
                        submission = toolbox.submission(arguments)
                    except ToolError as exc:
                        repairs += 1
                        transcript.event("invalid_ranking", call_id=call_id, problem=str(exc), repair=repairs)
                        if repairs > budgets.repairs:
                            raise GradingFailed(
                                f"no valid ranking after {budgets.repairs} repairs: {exc}"
                            ) from None
                        self._reply(
                            messages,
                            transcript,
                            call_id,
                            name,
                            f"error: {exc}" + (f" ({cut.strip()})" if cut else ""),
                            native,
                            started,
                            True,
                        )
                        continue
                    transcript.event(
                        "submitted",
                        call_id=call_id,
                        ranking=submission.labels,
                        confidence=submission.confidence,
                        usage=usage.as_dict(),
                    )
                    return submission
                try:
                    output, is_error = toolbox.call(name, arguments), False
                except ToolError as exc:
                    output, is_error = f"error: {exc}" + (f" ({cut.strip()})" if cut else ""), True
                usage.tool_output_chars += len(output)
                self._reply(messages, transcript, call_id, name, output, native, started, is_error)
            if time.monotonic() > deadline():
                raise GradingFailed(f"wall-time budget exhausted ({budgets.wall_seconds:g}s)")
        raise GradingFailed(f"turn budget exhausted ({budgets.turns} turns) without a valid ranking")

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
        return [{"role": "system", "content": system}, {"role": "user", "content": task}]

    @staticmethod
    def _calls(message: Any, native: bool, markers: Markers) -> list[tuple[str, str, Any]]:
        if native and message.tool_calls:
            return [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls]
        parsed = _text_tool_call(message.content)
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

    def _refused_tool_choice(
        self, exc: openai.APIError, kwargs: dict[str, Any], transcript: Transcript
    ) -> bool:
        """Whether the request failed only for its `tool_choice` form, which is then remembered and never
        resent (a 4xx or a 500 naming the field is no outage); raises GradingFailed when the prompt
        overflowed the server's context, naming the limit."""
        overflow = _context_overflow(exc)
        if overflow:
            raise GradingFailed(overflow) from None
        if not (_names_tool_choice(exc) and "tool_choice" in kwargs):
            return False
        self._refused_tool_choices.add(kwargs["tool_choice"])
        transcript.event("tool_choice_refused", choice=kwargs["tool_choice"], error=str(exc)[:300])
        return True

    def _complete(
        self,
        messages: list[dict],
        toolbox: Toolbox,
        native: bool,
        deadline: float,
        transcript: Transcript,
        usage: _Usage,
        tool_choice: str = "auto",
    ) -> Any:
        budgets = self.config.budgets
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise GradingFailed(f"wall-time budget exhausted ({budgets.wall_seconds:g}s)")

        def note_retry(state: RetryCallState) -> None:
            usage.retries += 1
            error = state.outcome.exception() if state.outcome else None
            transcript.event(
                "retry",
                attempt=state.attempt_number,
                error=f"{type(error).__name__}: {error}",
                sleep=round(state.next_action.sleep, 3) if state.next_action else None,
            )

        kwargs: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self._max_tokens(usage),
        }
        if not native and self.config.structured:
            kwargs["response_format"] = _reply_format(toolbox, only_submit=tool_choice == "required")
        if native:
            kwargs["tools"] = toolbox.schemas()
            # Explicit: OpenAI reads a missing tool_choice as "auto", llama.cpp's Python server as "none".
            if tool_choice not in self._refused_tool_choices:
                kwargs["tool_choice"] = tool_choice
        retrying = Retrying(
            retry=retry_if_exception(
                lambda e: isinstance(e, RETRYABLE) and not _names_tool_choice(e) and not _context_overflow(e)
            ),
            stop=stop_after_attempt(budgets.retries + 1) | stop_after_delay(remaining),
            wait=wait_exponential_jitter(multiplier=budgets.retry_wait_initial, max=budgets.retry_wait_max),
            before_sleep=note_retry,
            reraise=True,
        )
        started = time.monotonic()
        try:
            for attempt in retrying:
                with attempt:
                    usage.requests += 1
                    waiting = time.monotonic()
                    with toolbox.view.resources.llm:
                        waited = time.monotonic() - waiting
                        usage.slot_wait += waited
                        deadline += waited
                        timeout = max(0.1, min(budgets.request_timeout, deadline - time.monotonic()))
                        # The raw POST: `chat.completions.create` re-validates every message of the growing
                        # conversation against the SDK's TypedDicts on each turn, the loop's largest CPU cost.
                        if self.config.stream:
                            response = self._streamed(kwargs, timeout, deadline)
                        else:
                            response = self.client.post(
                                "/chat/completions",
                                body=kwargs,
                                cast_to=ChatCompletion,
                                options={"timeout": timeout},
                            )
        except RETRYABLE as exc:
            if self._refused_tool_choice(exc, kwargs, transcript):
                return self._complete(messages, toolbox, native, deadline, transcript, usage, tool_choice)
            if time.monotonic() >= deadline - 0.05:  # the request was cut short by the wall-time budget
                raise GradingFailed(f"wall-time budget exhausted ({budgets.wall_seconds:g}s)") from None
            raise GradingFailed(
                f"endpoint failed after {usage.retries + 1} attempt(s): {type(exc).__name__}: {exc}"
            ) from None
        except openai.APIError as exc:  # 400, 401, 404...: retrying will not help
            if self._refused_tool_choice(exc, kwargs, transcript):
                return self._complete(messages, toolbox, native, deadline, transcript, usage, tool_choice)
            raise GradingFailed(f"endpoint refused the request: {type(exc).__name__}: {exc}") from None
        if not getattr(response, "choices", None):
            raise GradingFailed("endpoint returned no choices")
        reported = response.usage
        if reported is not None:
            usage.prompt_tokens += reported.prompt_tokens or 0
            usage.completion_tokens += reported.completion_tokens or 0
            usage.cached_prompt_tokens += _cached_tokens(response)
        else:  # some servers omit usage: estimate, so the token budget still binds
            usage.prompt_tokens += len(json.dumps(messages)) // 4
            answer = response.choices[0].message
            written = (answer.content or "") + "".join(
                c.function.name + _arguments_text(c.function.arguments) for c in answer.tool_calls or []
            )
            usage.completion_tokens += len(written) // 4
        transcript.event(
            "response",
            seconds=round(time.monotonic() - started, 4),
            finish_reason=response.choices[0].finish_reason,
            usage=reported.model_dump() if reported is not None else None,
        )
        return response

    def _streamed(self, kwargs: dict[str, Any], timeout: float, deadline: float) -> ChatCompletion:
        """One completion, streamed and assembled. Past the deadline the stream is closed, so the server
        sees the connection go and stops generating (llama.cpp keeps generating a non-streamed request whose
        client left, to its max_tokens); the grading then fails on its wall-time budget.

        Raises:
            GradingFailed: the wall-time budget ran out mid-reply.
            openai.APIError: as a non-streamed request would (status, connection, timeout between chunks).
        """
        body = {**kwargs, "stream": True, "stream_options": {"include_usage": True}}
        stream = self.client.post(
            "/chat/completions",
            body=body,
            cast_to=ChatCompletion,
            options={"timeout": timeout},
            stream=True,
            stream_cls=_ChunkStream,
        )
        with stream:
            return _assemble(stream, deadline, self.config.budgets.wall_seconds)

    # -- helpers -----------------------------------------------------------------------------------------

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
