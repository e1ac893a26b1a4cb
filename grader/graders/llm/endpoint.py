"""The LLM grader's endpoint: one OpenAI-compatible chat-completions server, spoken to over HTTP with httpx.

It owns the transport, so the agent loop sees one call, `Endpoint.complete`: messages and tools in, a `Reply`
out. Replies come streamed (server-sent events, read to the body's end so the connection is kept alive for the
next turn) or whole; usage is passed on as the server reported it; transient failures are retried with
backoff (tenacity). What a server turns out not to support is learnt once per endpoint, recorded in the
grading's transcript, and not asked again:

- a whole JSON reply to a streamed request is read as the reply (then replies are requested whole);
- a refusal naming `stream`, `tool_choice` or `response_format` (a 4xx; for the last two also a 500) drops
  that option at once (`tool_choice` other than "auto" becomes "auto"; "required" with a single tool offered
  becomes the same choice in the other form, that tool named, unless that form was refused too);
- a streamed reply that carries no choices is asked again whole;
- a server error that lasts through every retry of a request carrying `tool_choice` other than "auto",
  `response_format` or `stream` is tried once more without each of them before the call fails;
- a request that failed before any reply (a kept-alive connection the server had closed) is sent again at
  once, once a call, and not counted as an attempt.

No SDK: the chat-completions shape is small and stable, and the SDK's streaming helpers close the connection
at "[DONE]" and build a model per chunk, both of which a grading loop pays for on every turn.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, NoReturn

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_any,
    wait_exponential_jitter,
)

from grader.errors import GagarError
from grader.graders.llm.budgets import Budgets

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Status codes of a passing condition: retried as they are, never blamed on an option of the request.
TRANSIENT = frozenset({408, 429, 502, 503, 504})
OPTIONS = ("tool_choice", "response_format", "stream")  # the order options are dropped in
_NAMES = {
    "tool_choice": re.compile(r"\btool_choice\b"),
    "response_format": re.compile(r"\bresponse_format\b"),
    "stream": re.compile(r"\bstream(?:ing|ed|_options)?\b", re.IGNORECASE),
}
_OVERFLOW = re.compile(
    r"exceed_context_size|exceeds the available context|maximum context length|context_length_exceeded"
    r"|context (length|window|size) (is )?exceeded|too many tokens|prompt is too long",
    re.IGNORECASE,
)

ToolChoice = str | dict[str, Any]
"""A `tool_choice`: "auto", "required", "none", or {"type": "function", "function": {"name": ...}}."""
NAMED = "named function"
"""How a tool choice that names a function is called in lessons (its form, whatever the name)."""


def named_choice(name: str) -> dict[str, Any]:
    """The `tool_choice` that makes the model call the function `name`."""
    return {"type": "function", "function": {"name": name}}


def _form(choice: ToolChoice | None) -> str:
    """A tool choice's form: its string, or NAMED for any choice that names a function."""
    return choice if isinstance(choice, str) or choice is None else NAMED


Note = Callable[..., Any]
"""Records an event of the call: `note(kind, **fields)` (a `Transcript.event`)."""


class EndpointFailed(GagarError):
    """The endpoint gave no usable reply; the message is the reason in words (what the server answered, after
    how many attempts)."""


class ContextOverflow(EndpointFailed):
    """The server refused the conversation for not fitting the model's context (the message names the limit
    where the server gives it). Never retried: the caller shortens the conversation or fails.

    Attributes:
        limit: the model's context in tokens, where the server names it, else None.
        prompt_tokens: the refused conversation's size in tokens, where the server names it, else None.
    """

    def __init__(self, reason: str, limit: int | None = None, prompt_tokens: int | None = None) -> None:
        super().__init__(reason)
        self.limit = limit
        self.prompt_tokens = prompt_tokens


class DeadlinePassed(EndpointFailed):
    """The call's deadline passed before a reply was complete (a stream is closed, so the server stops)."""


@dataclass(frozen=True)
class ToolCall:
    """A tool call of a reply. `arguments` is the JSON string the chat format has, or an object as some
    servers send it."""

    id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class Reply:
    """The model's answer: its text, its tool calls, why it stopped, and the usage as reported (None where
    the server reported none; `cached_tokens` are prompt tokens served from the server's prefix cache)."""

    content: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    usage: dict[str, Any] | None
    cached_tokens: int = 0


@dataclass
class Traffic:
    """What calls cost in requests, counted as they go (so a call that fails has counted too)."""

    requests: int = 0
    """Requests sent: one an attempt, one for each re-ask after a refusal (a request sent again after a stale
    connection, which never reached the server, counts once)."""
    retries: int = 0
    """Requests sent again after a failure (the extra try without an option included)."""
    slot_wait: float = 0.0
    """Seconds spent waiting for a shared slot before sending (not counted against a deadline)."""


@dataclass(frozen=True)
class Lesson:
    """What a server refused, what is sent instead from then on, and the answer that taught it."""

    option: str
    refused: str
    instead: str
    cause: str

    def __str__(self) -> str:
        return f"{self.refused}: {self.instead} (learnt from: {self.cause})"

    def as_dict(self) -> dict[str, str]:
        """The lesson's fields, as a transcript's `learnt` event records them."""
        return {"option": self.option, "refused": self.refused, "instead": self.instead, "cause": self.cause}


class _Failure(Exception):
    """One exchange failed; `retryable` says whether asking again may help."""

    retryable = True


class _StatusFailure(_Failure):
    """The server answered with an error status (or an error event inside a stream)."""

    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status}: {message}" if message else f"HTTP {status}")
        self.status, self.message, self.body = status, message, body
        self.retryable = status in TRANSIENT or status >= 500


class _ConnectionFailure(_Failure):
    """The exchange broke at the connection. `unsent`: no byte of a reply came back on a connection that was
    open (the server had closed a kept-alive connection), so the request did not reach it."""

    def __init__(self, message: str, unsent: bool = False, retryable: bool = True) -> None:
        super().__init__(message)
        self.unsent, self.retryable = unsent, retryable


class _Timeout(_Failure):
    pass


class _NoChoices(_Failure):
    """A reply without choices."""

    retryable = False


@dataclass
class _Shape:
    """The optional parts of one call's request, as the endpoint's lessons leave them."""

    stream: bool
    tool_choice: ToolChoice | None
    response_format: dict[str, Any] | None
    only_tool: str | None = None
    """The name of the one tool the request offers, if it offers exactly one: "required" and that tool named
    then mean the same, so a server refusing one form can be sent the other."""

    def carries(self, option: str) -> bool:
        if option == "tool_choice":
            return self.tool_choice is not None
        return bool(getattr(self, option))

    def droppable(self) -> list[str]:
        """Options a lasting server error may be blamed on ("auto" is what every server takes)."""
        return [o for o in OPTIONS if self.carries(o) and (o != "tool_choice" or self.tool_choice != "auto")]


@dataclass
class _Call:
    """One `complete` call's state."""

    body: dict[str, Any]
    shape: _Shape
    deadline: float
    traffic: Traffic
    note: Note
    slot: AbstractContextManager[Any]
    resent: bool = False
    attempts: int = 0
    without: list[tuple[str, str]] = field(default_factory=list)
    """Options dropped after a lasting failure, with the form dropped."""


def _message_of(body: Any, text: str) -> str:
    """The error message of an error body (OpenAI's `{"error": {"message"}}`, vLLM's `{"message"}`,
    FastAPI's `{"detail"}`), else the body's text."""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(error, str):
            return error
        for key in ("message", "detail"):
            if body.get(key):
                value = body[key]
                return value if isinstance(value, str) else json.dumps(value)
    return text.strip()[:500]


def _error_in_body(body: dict[str, Any], fallback: str) -> _StatusFailure:
    """The failure an error body sent with status 200 or inside a stream stands for: its `error.code` as the
    status where that is an HTTP error status, else 500."""
    error = body["error"]
    code = error.get("code") if isinstance(error, dict) else None
    status = code if isinstance(code, int) and 400 <= code < 600 else 500
    return _StatusFailure(status, _message_of(body, fallback), body)


def _context_overflow(status: int, message: str, body: Any) -> ContextOverflow | None:
    """The failure a server's refusal stands for when it refused a request for not fitting the model's
    context, else None.

    llama.cpp answers 400 `exceed_context_size_error` with `n_prompt_tokens` and `n_ctx`; vLLM 400 "This
    model's maximum context length is N tokens..."; OpenAI `context_length_exceeded`. The reason names the
    limit where the server gives it."""
    if not (400 <= status < 500 or status == 500):
        return None
    text = f"{message} {json.dumps(body) if isinstance(body, dict) else ''}"
    if not _OVERFLOW.search(text):
        return None
    details = body if isinstance(body, dict) else {}
    if isinstance(details.get("error"), dict):
        details = details["error"]
    prompt, limit = details.get("n_prompt_tokens"), details.get("n_ctx")
    if limit is None:
        match = re.search(r"(?:maximum context length is|context size \(|context window of)\s*(\d+)", text)
        limit = int(match.group(1)) if match else None
    if prompt is None:  # vLLM: "... you requested 9000 tokens (8000 in the messages, 1000 in the completion)"
        match = re.search(r"\((\d+) in the messages", text)
        prompt = int(match.group(1)) if match else None
    size = f" ({prompt:,} prompt tokens)" if isinstance(prompt, int) else ""
    bound = f"the model's context of {limit:,} tokens" if isinstance(limit, int) else "the model's context"
    reason = (
        f"context overflow: the conversation{size} no longer fits {bound}; give the server a larger context "
        f"or lower the tool output budget (HTTP {status}: {message[:200]})"
    )
    return ContextOverflow(
        reason,
        limit if isinstance(limit, int) else None,
        prompt if isinstance(prompt, int) else None,
    )


def _content(value: Any) -> str | None:
    """A message's content: a string, or the text of its parts where a server sends a list."""
    if isinstance(value, list):
        value = "".join(p.get("text") or "" for p in value if isinstance(p, dict)) or None
    return value if isinstance(value, str) or value is None else str(value)


def _usage(value: Any) -> dict[str, Any] | None:
    """The usage a reply reports: a dict with an integer `prompt_tokens` or `completion_tokens`, neither of
    them anything else (the grader adds both to its token budget); else None."""
    if not isinstance(value, dict):
        return None
    counts = [value.get(k) for k in ("prompt_tokens", "completion_tokens")]
    if any(c is not None and (not isinstance(c, int) or isinstance(c, bool)) for c in counts):
        return None
    return value if any(c is not None for c in counts) else None


def _cached_tokens(usage: dict[str, Any] | None, timings: Any) -> int:
    """Prompt tokens the server took from its prefix cache: OpenAI's and vLLM's (with
    `--enable-prompt-tokens-details`) `usage.prompt_tokens_details.cached_tokens`, else llama.cpp's
    `timings.cache_n`; 0 where neither is reported as a finite number."""
    details = (usage or {}).get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None and isinstance(timings, dict):
        cached = timings.get("cache_n")
    finite = isinstance(cached, int) or (isinstance(cached, float) and math.isfinite(cached))
    return int(cached) if finite else 0


def _call_id(value: Any) -> str:
    return value if isinstance(value, str) and value else f"call-{secrets.token_hex(4)}"


def _parse_completion(body: Any) -> Reply:
    """The reply a whole chat.completion body holds (its first choice).

    Raises:
        _NoChoices: the body has no choice.
        _StatusFailure: the body is an error (some proxies answer errors with status 200).
        _ConnectionFailure: the body is not a JSON object.
    """
    if not isinstance(body, dict):
        raise _ConnectionFailure(f"the reply is not a JSON object: {str(body)[:200]}")
    choices = body.get("choices")
    if not choices and body.get("error"):
        raise _error_in_body(body, "")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _NoChoices("the endpoint returned no choices")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    calls = [c for c in message.get("tool_calls") or [] if isinstance(c, dict)]
    if not calls and isinstance(message.get("function_call"), dict):  # the legacy single-call form
        calls = [{"function": message["function_call"]}]
    tool_calls = []
    for call in calls:
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        arguments = function.get("arguments")
        tool_calls.append(
            ToolCall(
                _call_id(call.get("id")),
                str(function.get("name") or ""),
                "" if arguments is None else arguments,
            )
        )
    usage = _usage(body.get("usage"))
    return Reply(
        content=_content(message.get("content")),
        tool_calls=tuple(tool_calls),
        finish_reason=str(choice.get("finish_reason") or "stop"),
        usage=usage,
        cached_tokens=_cached_tokens(usage, body.get("timings")),
    )


def _lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """The body's lines (ended by LF, CRLF or CR, as server-sent events may be). Split here from the raw
    bytes: the HTTP library's line decoder cost more than the rest of reading a reply."""
    pending = b""
    for chunk in chunks:
        lines = (pending + chunk).splitlines(keepends=True)
        # A last line without its end waits for the next chunk (so does a lone CR, which may start a CRLF).
        pending = lines.pop() if lines and not lines[-1].endswith(b"\n") else b""
        for line in lines:
            yield line.rstrip(b"\r\n").decode("utf-8", "replace")
    if pending:
        yield pending.rstrip(b"\r\n").decode("utf-8", "replace")


def _events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The JSON objects a server-sent event stream carries, up to "[DONE]" (the body is still read to its
    end, so the connection goes back to the pool).

    Raises:
        _StatusFailure: the server reported an error inside the stream.
        _ConnectionFailure: an event is not JSON (a stream cut or garbled).
    """
    data: list[str] = []
    done = False
    for line in _with_end(lines):
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
            continue
        if line or not data:  # event:, id:, retry: and comments carry nothing a completion needs
            continue
        payload, data = "\n".join(data), []
        if done or payload.startswith("[DONE]"):
            done = True
            continue
        try:
            event = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise _ConnectionFailure(f"Connection garbled mid-reply: an event is not JSON ({exc})") from None
        if isinstance(event, dict) and event.get("error") and not event.get("choices"):
            raise _error_in_body(event, "an error occurred during streaming")
        if isinstance(event, dict):
            yield event


def _with_end(lines: Iterator[str]) -> Iterator[str]:
    yield from lines
    yield ""  # ends a last event the body did not end with a blank line


class _Assembly:
    """The reply a stream of chunks adds up to: content, tool calls by index (arguments concatenated; an
    object given whole is kept), finish reason, usage and llama.cpp's timings. Chunks stay the server's
    parsed JSON: a real server sends one per token, and building a model for each cost more than the rest of
    a turn."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.timings: Any = None
        self.choices = 0

    def add(self, chunk: dict[str, Any]) -> None:
        if chunk.get("timings"):
            self.timings = chunk["timings"]
        if _usage(chunk.get("usage")) is not None:
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        for choice in (choices if isinstance(choices, list) else [])[:1]:
            if not isinstance(choice, dict):
                continue
            self.choices += 1
            self.finish = choice.get("finish_reason") or self.finish
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            text = _content(delta.get("content"))
            if text:
                self.content.append(text)
            for piece in delta.get("tool_calls") or []:
                if not isinstance(piece, dict):
                    continue
                index = piece.get("index", 0)
                call = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
                call["id"] = piece.get("id") or call["id"]
                function = piece.get("function")
                if isinstance(function, dict):
                    call["name"] = call["name"] or function.get("name") or ""
                    arguments = function.get("arguments")
                    if isinstance(arguments, str):
                        call["arguments"] += arguments
                    elif arguments is not None:
                        call["arguments"] = json.dumps(arguments)

    def reply(self) -> Reply:
        if not self.choices:
            raise _NoChoices("the streamed reply carried no choices")
        calls = tuple(
            ToolCall(_call_id(call["id"]), call["name"], call["arguments"])
            for _, call in sorted(self.calls.items())
        )
        return Reply(
            content="".join(self.content) or None,
            tool_calls=calls,
            finish_reason=self.finish or "stop",
            usage=self.usage,
            cached_tokens=_cached_tokens(self.usage, self.timings),
        )


class Endpoint:
    """An OpenAI-compatible chat-completions endpoint, shared by every grading of one grader (thread-safe):
    one connection pool, and one set of lessons (what the server refused), learnt once.

    Args:
        model: the model name sent with every request.
        base_url: e.g. http://localhost:8000/v1 (default: $OPENAI_BASE_URL, else the OpenAI API).
        api_key: sent as a bearer token (servers that need none accept any).
        temperature: sampling temperature sent with every request.
        stream: request streamed replies (a request cut by its deadline then closes its connection mid-reply,
            and the server stops generating); falls back to whole replies where the server does not stream.
        budgets: the request timeout and the retry settings (`request_timeout`, `retries`,
            `retry_wait_initial`, `retry_wait_max`).
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str = "EMPTY",
        *,
        temperature: float = 0.0,
        stream: bool = True,
        budgets: Budgets | None = None,
    ) -> None:
        self.model, self.temperature = model, temperature
        self.budgets = budgets or Budgets()
        base = base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        self.url = base.rstrip("/") + "/chat/completions"
        self._headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        self._client = httpx.Client(
            timeout=self.budgets.request_timeout,
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=100),
        )
        self._lock = threading.Lock()
        self._lessons: dict[tuple[str, str], Lesson] = {}
        self._refused_choices: set[str] = set()
        self._streams = stream
        self._takes_response_format = True
        self._context_tokens: int | None = None

    @property
    def lessons(self) -> list[Lesson]:
        """What this endpoint refused so far, in the order learnt."""
        with self._lock:
            return list(self._lessons.values())

    @property
    def context_tokens(self) -> int | None:
        """The model's context in tokens, as the first context overflow that named it said; None before."""
        return self._context_tokens

    def close(self) -> None:
        """Closes the connection pool (idempotent); a `complete` call after it raises RuntimeError."""
        self._client.close()

    def __del__(self) -> None:
        # Graders made per grading (`gagar distill` makes one per sample) would otherwise leave their
        # kept-alive connections open until the sockets themselves are collected.
        client = getattr(self, "_client", None)
        if client is not None:
            client.close()

    # -- the call ------------------------------------------------------------------------------------------

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: ToolChoice | None = None,
        response_format: dict[str, Any] | None = None,
        max_tokens: int,
        deadline: float,
        traffic: Traffic | None = None,
        note: Note | None = None,
        slot: AbstractContextManager[Any] | None = None,
    ) -> Reply:
        """The model's reply to the conversation.

        Args:
            messages: the conversation, in the chat format.
            tools: function schemas offered (None: none).
            tool_choice: "auto", "required", a function named (`named_choice`)... (None: not sent); a form
                the endpoint refused is replaced by the same choice in its other form where `tools` holds one
                tool ("required" <-> that tool named), else by "auto" (left out, if "auto" was refused).
            response_format: a structured output constraint (None: not sent; left out once refused).
            max_tokens: tokens the reply may have.
            deadline: `time.monotonic()` by which the reply must be complete; waiting for `slot` moves it.
            traffic: counts requests, retries and slot waits.
            note: records retries, resends and lessons (`Transcript.event`).
            slot: held while a request is in flight (a shared bound on requests).

        Returns:
            The reply (the first choice).

        Raises:
            DeadlinePassed: the deadline passed first.
            ContextOverflow: the conversation does not fit the model's context.
            EndpointFailed: no reply, after retries where retrying could help.
            RuntimeError: the endpoint was closed.
        """
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": max_tokens,
        }
        if tools is not None:
            body["tools"] = tools
        call = _Call(
            body=body,
            shape=self._shape(tool_choice, response_format, tools),
            deadline=deadline,
            traffic=traffic if traffic is not None else Traffic(),
            note=note or (lambda kind, **fields: None),
            slot=slot if slot is not None else nullcontext(),
        )
        try:
            return self._retried(call)
        except _Failure as failure:
            last = failure
        # A refusal or a server error to the end: once more without each option it may be blamed on.
        first = last
        while _blames_options(last) and call.shape.droppable():
            option = call.shape.droppable()[0]
            tried = [form for _, form in call.without]
            call.without.append((option, self._drop(call.shape, option, tried)))
            call.traffic.retries += 1
            call.note("fallback", without=option, after=str(last))
            try:
                reply = self._attempt(call)
            except _Failure as failure:
                last = failure
                continue
            for dropped, form in call.without:
                self._learn(call, dropped, form, f"{first} on every attempt with it, a reply without it")
            return reply
        self._fail(call, last)

    def _shape(
        self,
        tool_choice: ToolChoice | None,
        response_format: dict[str, Any] | None,
        tools: list[dict[str, Any]] | None,
    ) -> _Shape:
        only = tools[0]["function"]["name"] if tools is not None and len(tools) == 1 else None
        shape = _Shape(stream=self._streams, tool_choice=tool_choice, response_format=None, only_tool=only)
        with self._lock:
            while shape.tool_choice is not None and _form(shape.tool_choice) in self._refused_choices:
                shape.tool_choice = self._instead(shape)
            if self._takes_response_format:
                shape.response_format = response_format
        return shape

    def _instead(self, shape: _Shape, tried: Iterable[str] = ()) -> ToolChoice | None:
        """What is sent in place of the shape's tool choice once it is refused (under `_lock`): the same
        choice in its other form where one tool is offered ("required" <-> that tool named), else "auto",
        else nothing; never a form refused before or in `tried` (forms this call already tried)."""
        excluded = self._refused_choices | set(tried)
        form = _form(shape.tool_choice)
        if shape.only_tool is not None and form in ("required", NAMED):
            other: ToolChoice = named_choice(shape.only_tool) if form == "required" else "required"
            if _form(other) not in excluded:
                return other
        if form == "auto" or "auto" in excluded:
            return None
        return "auto"

    def _retried(self, call: _Call) -> Reply:
        budgets = self.budgets

        def note_retry(state: RetryCallState) -> None:
            call.traffic.retries += 1
            error = state.outcome.exception() if state.outcome else None
            call.note(
                "retry",
                attempt=state.attempt_number,
                error=str(error),
                sleep=round(state.next_action.sleep, 3) if state.next_action else None,
            )

        retrying = Retrying(
            retry=retry_if_exception(lambda e: isinstance(e, _Failure) and e.retryable),
            stop=stop_any(
                stop_after_attempt(budgets.retries + 1), lambda _: time.monotonic() >= call.deadline
            ),
            wait=wait_exponential_jitter(multiplier=budgets.retry_wait_initial, max=budgets.retry_wait_max),
            before_sleep=note_retry,
            reraise=True,
        )
        for attempt in retrying:
            with attempt:
                return self._attempt(call)
        raise AssertionError("unreachable: tenacity reraises the last failure")

    def _attempt(self, call: _Call) -> Reply:
        """One attempt: a request, and at once (not counted as an attempt) the same request again after a
        stale connection, or adapted after a refusal that names an option or a stream without choices."""
        if time.monotonic() >= call.deadline:
            raise DeadlinePassed("the deadline passed before the request")
        call.attempts += 1
        call.traffic.requests += 1
        waiting = time.monotonic()
        with call.slot:
            waited = time.monotonic() - waiting
            call.traffic.slot_wait += waited
            call.deadline += waited
            while True:
                try:
                    return self._exchange(call)
                except _ConnectionFailure as failure:
                    if not failure.unsent or call.resent:
                        raise
                    call.resent = True  # once a call: a server that drops every request is an outage
                    call.note("resent", error=str(failure))
                except _StatusFailure as failure:
                    overflow = _context_overflow(failure.status, failure.message, failure.body)
                    if overflow:
                        if overflow.limit is not None:
                            self._context_tokens = overflow.limit
                        raise overflow from None
                    named = _named_refusal(failure, call.shape)
                    if named is None:
                        raise
                    form = self._drop(call.shape, named)
                    self._learn(call, named, form, str(failure))
                    call.traffic.requests += 1
                except _NoChoices:
                    if not call.shape.stream:
                        raise
                    call.shape.stream = False
                    self._learn(call, "stream", "stream", "a streamed reply carried no choices")
                    call.traffic.requests += 1

    def _drop(self, shape: _Shape, option: str, tried: Iterable[str] = ()) -> str:
        """Takes `option` out of `shape` (a tool choice is replaced as `_instead` says, never by a form in
        `tried`); returns the form taken out."""
        if option in ("stream", "response_format"):
            setattr(shape, option, False if option == "stream" else None)
            return option
        refused = _form(shape.tool_choice)
        with self._lock:
            shape.tool_choice = self._instead(shape, {refused, *tried})
        return refused

    def _learn(self, call: _Call, option: str, form: str, cause: str) -> None:
        """Remembers that this endpoint refused `form` of `option`, and records it in the call's transcript
        (each grading that meets it says so; the endpoint keeps one lesson)."""
        cause = cause if len(cause) <= 300 else cause[:300] + "..."
        with self._lock:
            if option == "stream":
                self._streams = False
                lesson = Lesson(option, "streamed replies", "replies are requested whole", cause)
            elif option == "response_format":
                self._takes_response_format = False
                lesson = Lesson(option, "response_format", "left out (replies are read as text)", cause)
            else:
                self._refused_choices.add(form)
                instead = "left out" if "auto" in self._refused_choices else '"auto" sent instead'
                other = {"required": NAMED, NAMED: "required"}.get(form)
                if other is not None and other not in self._refused_choices:
                    alternative = "that tool named" if other == NAMED else '"required"'
                    instead += f" ({alternative} where the request offers one tool)"
                refused = NAMED if form == NAMED else f'"{form}"'
                lesson = Lesson(option, f"tool_choice {refused}", instead, cause)
            self._lessons.setdefault((option, form), lesson)
        call.note("learnt", **lesson.as_dict())

    @staticmethod
    def _fail(call: _Call, failure: _Failure) -> NoReturn:
        if isinstance(failure, _NoChoices):
            raise EndpointFailed(f"endpoint returned no choices ({failure})")
        if time.monotonic() >= call.deadline - 0.05:  # the request was cut short by the deadline
            raise DeadlinePassed(f"the deadline passed: {failure}")
        dropped = " and ".join(dict.fromkeys(option for option, _ in call.without))
        without = f", then once without {dropped}" if dropped else ""
        if failure.retryable:
            attempts = call.attempts - len(call.without)
            raise EndpointFailed(f"endpoint failed after {attempts} attempt(s){without}: {failure}")
        raise EndpointFailed(f"endpoint refused the request{without}: {failure}")

    # -- one exchange --------------------------------------------------------------------------------------

    def _exchange(self, call: _Call) -> Reply:
        """One request and its reply, read to the end.

        Raises:
            DeadlinePassed: mid-stream (the stream is closed, so the server stops generating).
            _StatusFailure, _ConnectionFailure, _Timeout, _NoChoices: as the exchange went.
        """
        shape = call.shape
        body = dict(call.body)
        if shape.tool_choice is not None:
            body["tool_choice"] = shape.tool_choice
        if shape.response_format is not None:
            body["response_format"] = shape.response_format
        if shape.stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        timeout = max(0.1, min(self.budgets.request_timeout, call.deadline - time.monotonic()))
        request = self._client.build_request(
            "POST",
            self.url,
            content=json.dumps(body).encode(),
            headers={**self._headers, "Accept": "text/event-stream" if shape.stream else "application/json"},
            timeout=timeout,
        )
        try:
            response = self._client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise _Timeout(f"timed out after {timeout:g}s ({type(exc).__name__})") from None
        except httpx.ConnectError as exc:
            raise _ConnectionFailure(f"Connection failed: {exc}") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            message = f"Connection closed before a reply: {type(exc).__name__}: {exc}"
            raise _ConnectionFailure(message, unsent=True) from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise _ConnectionFailure(f"Connection impossible: {exc}", retryable=False) from None
        except httpx.TransportError as exc:
            raise _ConnectionFailure(f"Connection failed: {type(exc).__name__}: {exc}") from None
        try:
            return self._read(response, call, stream=shape.stream)
        finally:
            response.close()  # after a body read to its end, the connection goes back to the pool

    def _read(self, response: httpx.Response, call: _Call, stream: bool) -> Reply:
        what = "stream" if stream else "reply"
        try:
            if response.status_code >= 300:
                text = response.read().decode("utf-8", "replace")
                try:
                    body: Any = json.loads(text)
                except json.JSONDecodeError:
                    body = None
                raise _StatusFailure(response.status_code, _message_of(body, text), body)
            chunks = response.iter_bytes()
            first = b""
            for chunk in chunks:
                first += chunk
                if first.strip():
                    break
            whole = "json" in response.headers.get("content-type", "") or first.lstrip().startswith(b"{")
            if not stream or whole:
                data = first + b"".join(chunks)
                try:
                    parsed = json.loads(data)
                except json.JSONDecodeError:
                    raise _ConnectionFailure(f"the reply is not JSON: {data[:200]!r}") from None
                reply = _parse_completion(parsed)
                if stream:  # a whole reply to a streamed request: read, and asked for whole from now on
                    call.shape.stream = False
                    self._learn(
                        call, "stream", "stream", "a streamed request was answered with a whole reply"
                    )
                return reply
            assembly = _Assembly()
            for event in _events(_lines(itertools.chain([first], chunks))):
                if time.monotonic() > call.deadline:
                    raise DeadlinePassed("the deadline passed mid-reply (the stream was closed)")
                assembly.add(event)
            return assembly.reply()
        except httpx.TimeoutException as exc:
            raise _Timeout(f"timed out mid-{what} ({type(exc).__name__})") from None
        except (TypeError, AttributeError, ValueError, OverflowError) as exc:
            # The reply is the server's data: a field of a type the chat format does not have fails the call
            # as a garbled reply would, not as an error of the grader.
            raise _ConnectionFailure(f"the {what} is malformed: {type(exc).__name__}: {exc}") from None
        except httpx.HTTPError as exc:
            message = f"Connection broken mid-reply: the {what} broke off: {type(exc).__name__}: {exc}"
            raise _ConnectionFailure(message) from None


def _named_refusal(failure: _StatusFailure, shape: _Shape) -> str | None:
    """The option of the request a refusal names, if any: a 4xx naming it, or a 500 naming `tool_choice` or
    `response_format` (llama-cpp-python's server answers some forms of each so)."""
    if failure.status in TRANSIENT or not 400 <= failure.status <= 500:
        return None
    for option in OPTIONS:
        answerable = failure.status < 500 or option in ("tool_choice", "response_format")
        if answerable and shape.carries(option) and _NAMES[option].search(failure.message):
            return option
    return None


def _blames_options(failure: _Failure) -> bool:
    """Whether a failure that lasted may be the server refusing an option: a bad request, a validation error
    or a server error; not a passing condition (429, 502, 503, 504), a connection or a timeout."""
    if not isinstance(failure, _StatusFailure) or failure.status in TRANSIENT:
        return False
    return failure.status in (400, 422) or failure.status >= 500
