"""The LLM grader's endpoint: one OpenAI-compatible chat-completions server, spoken to with the `openai` SDK.

The agent loop sees one call, `Endpoint.complete`: messages and tools in, a `Reply` out. Around the SDK's
one request (`transport`), this module runs a call: a slot held while a request is in flight, retries of a
passing failure within the call's deadline (`retries`), a request lost on a stale kept-alive connection sent
again at once (once a call, not counted as an attempt), what a server turns out not to support learnt once
per endpoint and the request adapted (`fallbacks`), and the model's context learnt from a refusal for not
fitting it (`overflow`). Replies are read into a `Reply` by `completions`; failures are the kinds in
`failures`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from grader.graders.llm.budgets import Budgets
from grader.graders.llm.completions import Reply, ToolCall
from grader.graders.llm.failures import (
    TRANSIENT,
    ConnectionFailure,
    ContextOverflow,
    DeadlinePassed,
    EndpointFailed,
    Failure,
    NoChoicesFailure,
    StatusFailure,
)
from grader.graders.llm.fallbacks import (
    NAMED,
    OPTIONS,
    Lesson,
    Lessons,
    Shape,
    ToolChoice,
    blames_options,
    named_choice,
    named_refusal,
)
from grader.graders.llm.overflow import ContextLimit, context_overflow
from grader.graders.llm.retries import retried

if TYPE_CHECKING:
    import openai

Note = Callable[..., Any]
"""Records an event of the call: `note(kind, **fields)` (a `Transcript.event`)."""


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


@dataclass
class _Call:
    """One `complete` call's state."""

    request: dict[str, Any]
    shape: Shape
    deadline: float
    traffic: Traffic
    note: Note
    slot: AbstractContextManager[Any]
    resent: bool = False
    attempts: int = 0
    without: list[tuple[str, str]] = field(default_factory=list)
    """Options dropped after a lasting failure, with the form dropped."""


class Endpoint:
    """An OpenAI-compatible chat-completions endpoint, shared by every grading of one grader (thread-safe):
    one SDK client and its connection pool, and one set of lessons (what the server refused), learnt once.

    Args:
        model: the model name sent with every request.
        base_url: e.g. http://localhost:8000/v1 (default: $OPENAI_BASE_URL, else the OpenAI API).
        api_key: sent as a bearer token (default: $OPENAI_API_KEY, else "EMPTY": servers that need none
            accept any).
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
        api_key: str | None = None,
        *,
        temperature: float = 0.0,
        stream: bool = True,
        budgets: Budgets | None = None,
    ) -> None:
        self.model, self.temperature = model, temperature
        self.budgets = budgets or Budgets()
        # Imported here, not with this module: the SDK takes seconds to import (its types), and every `gagar`
        # command imports the LLM grader (distill's command names it) whether or not it grades with a model.
        from grader.graders.llm.transport import client, exchange

        self._exchange_with = exchange
        self._sdk: openai.OpenAI = client(base_url, api_key, self.budgets.request_timeout)
        self.url = str(self._sdk.base_url).rstrip("/") + "/chat/completions"
        self._lessons = Lessons(stream)
        self._context = ContextLimit()
        self._closed = False

    @property
    def lessons(self) -> list[Lesson]:
        """What this endpoint refused so far, in the order learnt (the model's context among them, once a
        plausible refusal named it)."""
        return self._lessons.all()

    @property
    def context_tokens(self) -> int | None:
        """The model's context in tokens, as a plausible context overflow named it and no reply since refuted;
        None before (or after a refutation)."""
        return self._context.tokens

    def close(self) -> None:
        """Closes the connection pool (idempotent); a `complete` call after it raises RuntimeError."""
        self._sdk.close()
        self._closed = True

    def __del__(self) -> None:
        # Graders made per grading (`gagar distill` makes one per sample) would otherwise leave their
        # kept-alive connections open until the sockets themselves are collected.
        sdk = getattr(self, "_sdk", None)
        if sdk is not None:
            sdk.close()

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
                It bounds each request as a whole (however slowly the server sends), and every retry's wait.
            traffic: counts requests, retries and slot waits.
            note: records retries, resends and lessons (`Transcript.event`).
            slot: held while a request is in flight (a shared bound on requests).

        Returns:
            The reply (the first choice).

        Raises:
            DeadlinePassed: the deadline passed first, or a retry's wait would have ended past it.
            ContextOverflow: the conversation does not fit the model's context.
            EndpointFailed: no reply, after retries where retrying could help.
            RuntimeError: the endpoint was closed.
        """
        if self._closed:
            raise RuntimeError("the endpoint was closed")
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": max_tokens,
        }
        if tools is not None:
            request["tools"] = tools
        call = _Call(
            request=request,
            shape=self._lessons.shape(tool_choice, response_format, tools),
            deadline=deadline,
            traffic=traffic if traffic is not None else Traffic(),
            note=note or (lambda kind, **fields: None),
            slot=slot if slot is not None else nullcontext(),
        )
        try:
            return self._retried(call)
        except Failure as failure:
            last = failure
        # A refusal or a server error to the end: once more without each option it may be blamed on.
        first = last
        while blames_options(last) and call.shape.droppable() and time.monotonic() < call.deadline:
            option = call.shape.droppable()[0]
            tried = [form for _, form in call.without]
            call.without.append((option, self._lessons.drop(call.shape, option, tried)))
            call.traffic.retries += 1
            call.note("fallback", without=option, after=str(last))
            try:
                reply = self._attempt(call)
            except Failure as failure:
                last = failure
                continue
            for dropped, form in call.without:
                self._learn(call, dropped, form, f"{first} on every attempt with it, a reply without it")
            return reply
        self._fail(call, last)

    def _retried(self, call: _Call) -> Reply:
        def note_retry(attempt: int, error: BaseException | None, sleep: float | None) -> None:
            call.traffic.retries += 1
            call.note(
                "retry",
                attempt=attempt,
                error=str(error),
                sleep=round(sleep, 3) if sleep is not None else None,
            )

        return retried(lambda: self._attempt(call), self.budgets, lambda: call.deadline, note_retry)

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
                    reply = self._exchange(call)
                except ConnectionFailure as failure:
                    if not failure.unsent or call.resent:
                        raise
                    call.resent = True  # once a call: a server that drops every request is an outage
                    call.note("resent", error=str(failure))
                    continue
                except StatusFailure as failure:
                    overflow = context_overflow(failure.status, failure.message, failure.body)
                    if overflow:
                        cause = self._context.judge(overflow)
                        if cause is not None and overflow.limit is not None:
                            call.note(
                                "learnt", **self._lessons.learn_context(overflow.limit, cause).as_dict()
                            )
                        raise overflow from None
                    named = named_refusal(failure, call.shape)
                    if named is None:
                        raise
                    form = self._lessons.drop(call.shape, named)
                    self._learn(call, named, form, str(failure))
                    call.traffic.requests += 1
                    continue
                except NoChoicesFailure:
                    if not call.shape.stream:
                        raise
                    call.shape.stream = False
                    self._learn(call, "stream", "stream", "a streamed reply carried no choices")
                    call.traffic.requests += 1
                    continue
                self._held(call, reply)
                return reply

    def _exchange(self, call: _Call) -> Reply:
        """One request with the call's shape, and its reply (see `transport.exchange`)."""
        shape = call.shape
        request = dict(call.request)
        if shape.tool_choice is not None:
            request["tool_choice"] = shape.tool_choice
        if shape.response_format is not None:
            request["response_format"] = shape.response_format

        def whole_to_stream() -> None:
            call.shape.stream = False
            self._learn(call, "stream", "stream", "a streamed request was answered with a whole reply")

        return self._exchange_with(
            self._sdk, request, shape.stream, call.deadline, self.budgets.request_timeout, whole_to_stream
        )

    def _held(self, call: _Call, reply: Reply) -> None:
        """Records the tokens a reply's request held in the model's context: a learnt limit below them is
        forgotten, and the call's transcript says so."""
        held = reply.context_tokens
        refuted = self._context.held_tokens(held)
        if refuted is not None and held is not None:
            call.note("learnt", **self._lessons.forget_context(refuted, held).as_dict())

    def _learn(self, call: _Call, option: str, form: str, cause: str) -> None:
        """Remembers that this endpoint refused `form` of `option`, and records it in the call's transcript
        (each grading that meets it says so; the endpoint keeps one lesson)."""
        call.note("learnt", **self._lessons.learn(option, form, cause).as_dict())

    @staticmethod
    def _fail(call: _Call, failure: Failure) -> NoReturn:
        if isinstance(failure, NoChoicesFailure):
            raise EndpointFailed(f"endpoint returned no choices ({failure})")
        if time.monotonic() >= call.deadline - 0.05:  # the request was cut short by the deadline
            raise DeadlinePassed(f"the deadline passed: {failure}")
        dropped = " and ".join(dict.fromkeys(option for option, _ in call.without))
        without = f", then once without {dropped}" if dropped else ""
        if failure.retryable:
            attempts = call.attempts - len(call.without)
            raise EndpointFailed(f"endpoint failed after {attempts} attempt(s){without}: {failure}")
        raise EndpointFailed(f"endpoint refused the request{without}: {failure}")


__all__ = [
    "NAMED",
    "OPTIONS",
    "TRANSIENT",
    "ContextOverflow",
    "DeadlinePassed",
    "Endpoint",
    "EndpointFailed",
    "Lesson",
    "Note",
    "Reply",
    "ToolCall",
    "ToolChoice",
    "Traffic",
    "named_choice",
]
