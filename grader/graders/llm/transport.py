"""One exchange with the endpoint over the `openai` SDK: a chat-completions request, and its reply read whole
or streamed, or the `Failure` it ended in.

The SDK is the only client: `chat.completions.with_raw_response.create(...)` (headers: a whole JSON reply to a
streamed request, `Retry-After`), streams read by iterating its chunks, its conventions kept
(`OPENAI_API_KEY`, `OPENAI_BASE_URL`), its own retries off (`max_retries=0`: retries and their budget are the
endpoint's) and its errors mapped to the endpoint's failures. Around it, what it does not do: the watchdog
that bounds the whole request (`watchdog.Guard`), a whole reply to a streamed request read as the reply.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import openai

from grader.graders.llm.completions import (
    NoChoices,
    Reply,
    StreamAssembly,
    field_of,
    plain,
    reply_of_completion,
)
from grader.graders.llm.failures import (
    ConnectionFailure,
    DeadlinePassed,
    Failure,
    Malformed,
    NoChoicesFailure,
    StatusFailure,
    Timeout,
    error_in_body,
    message_of,
    retry_after,
)
from grader.graders.llm.watchdog import Guard, GuardedTransport

DEADLINE, TIMEOUT = "deadline", "request timeout"
"""Why a watchdog cuts a request: the call's deadline, or the request timeout."""


def client(base_url: str | None, api_key: str | None, request_timeout: float) -> openai.OpenAI:
    """The SDK's client for an endpoint: its connections kept alive and under the watchdog, no retries of its
    own.

    Args:
        base_url: e.g. http://localhost:8000/v1; None: `$OPENAI_BASE_URL`, else the OpenAI API (the SDK's
            convention).
        api_key: sent as a bearer token; None: `$OPENAI_API_KEY`, else "EMPTY" (servers that need none
            accept any).
        request_timeout: the longest a request may take, in seconds.
    """
    transport = GuardedTransport(
        httpx2.HTTPTransport(limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100))
    )
    http = openai.DefaultHttpx2Client(transport=transport, timeout=request_timeout)
    return openai.OpenAI(
        base_url=base_url or None,
        api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
        max_retries=0,
        timeout=request_timeout,
        http_client=http,
    )


def exchange(
    sdk: openai.OpenAI,
    request: dict[str, Any],
    stream: bool,
    deadline: float,
    request_timeout: float,
    whole_to_stream: Callable[[], None],
) -> Reply:
    """One request and its reply, read to the end; cut at the deadline or the request timeout, whichever
    comes first, however the server trickles its bytes.

    Args:
        sdk: the client.
        request: the arguments of `chat.completions.create` (model, messages, ...; no `stream`).
        stream: ask for a streamed reply.
        deadline: `time.monotonic()` by which the reply must be complete.
        request_timeout: seconds the request may take.
        whole_to_stream: called when a streamed request gets a whole JSON reply (read as the reply).

    Returns:
        The reply (its first choice).

    Raises:
        DeadlinePassed: the deadline passed first (the connection was cut, so the server stops).
        StatusFailure, ConnectionFailure, Timeout, Malformed, NoChoicesFailure: as the exchange went.
    """
    now = time.monotonic()
    seconds = max(0.1, min(request_timeout, deadline - now))
    reason = DEADLINE if deadline - now <= request_timeout else TIMEOUT
    what = "stream" if stream else "reply"
    with Guard(now + seconds, reason) as guard, _as_failures(guard, seconds, what):
        return _read(sdk, request, stream, seconds, guard, whole_to_stream)


@contextmanager
def _as_failures(guard: Guard, seconds: float, what: str) -> Iterator[None]:
    """Turns what the SDK (and its HTTP library) raises into the endpoint's failures; a request the watchdog
    cut fails for the cut (`DeadlinePassed` or `Timeout`), whatever broke in the reading thread."""
    try:
        yield
    except Failure as failure:
        _raise_if_cut(guard, seconds, what)
        raise failure from None
    except openai.APIStatusError as exc:
        _raise_if_cut(guard, seconds, what)
        raise _status_failure(exc) from None
    except (openai.APITimeoutError, httpx2.TimeoutException) as exc:
        _raise_if_cut(guard, seconds, what)
        where = f"mid-{what}" if guard.replied else f"after {seconds:g}s"
        raise Timeout(f"timed out {where} ({type(exc.__cause__ or exc).__name__})") from None
    except (openai.APIConnectionError, httpx2.TransportError) as exc:
        _raise_if_cut(guard, seconds, what)
        raise _connection_failure(exc, guard.replied, what) from None
    except openai.APIError as exc:  # an error event inside a stream
        _raise_if_cut(guard, seconds, what)
        body = exc.body if isinstance(exc.body, dict) else {"message": exc.message}
        raise error_in_body({"error": body}, exc.message) from None
    except json.JSONDecodeError as exc:
        _raise_if_cut(guard, seconds, what)
        raise Malformed(f"Connection garbled mid-reply: the {what} is not JSON ({exc})") from None
    except (TypeError, AttributeError, ValueError, OverflowError) as exc:
        # The reply is the server's data: a field of a type the chat format does not have fails the call as
        # a garbled reply would, not as an error of the grader.
        _raise_if_cut(guard, seconds, what)
        raise Malformed(f"the {what} is malformed: {type(exc).__name__}: {exc}") from None


def _read(
    sdk: openai.OpenAI,
    request: dict[str, Any],
    stream: bool,
    seconds: float,
    guard: Guard,
    whole: Callable[[], None],
) -> Reply:
    options: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    raw = sdk.chat.completions.with_raw_response.create(**request, **options, timeout=seconds)
    if not stream:
        return _completion(raw.parse(), guard, "reply")
    if "json" in raw.headers.get("content-type", ""):
        reply = _completion(json.loads(raw.http_response.read()), guard, "stream")
        whole()  # a whole reply to a streamed request: read, and asked for whole from now on
        return reply
    assembly = StreamAssembly()
    chunks = raw.parse()
    try:
        for chunk in chunks:
            assembly.add(chunk)
    except BaseException:
        guard.abandoned = True  # the connection is closed, not read to its end
        chunks.close()
        raise
    _raise_if_cut(guard, seconds, "stream")  # a body without a length ends where the cut closed it
    try:
        return assembly.reply()
    except NoChoices as exc:
        raise NoChoicesFailure(str(exc)) from None


def _completion(parsed: Any, guard: Guard, what: str) -> Reply:
    """The reply of a whole completion (the SDK's model or the body's JSON)."""
    if parsed is None or isinstance(parsed, (str, bytes, list, int, float, bool)):
        raise Malformed(f"the {what} is not a JSON object: {str(parsed)[:200]}")
    if not field_of(parsed, "choices") and field_of(parsed, "error"):  # some proxies answer errors with 200
        body = plain(parsed)
        raise error_in_body(body if isinstance(body, dict) else {"error": body}, "")
    try:
        return reply_of_completion(parsed)
    except NoChoices as exc:
        raise NoChoicesFailure(str(exc)) from None


def _raise_if_cut(guard: Guard, seconds: float, what: str) -> None:
    """Raises the failure a cut by the watchdog stands for, if it cut the request."""
    if guard.cut == DEADLINE:
        raise DeadlinePassed(f"the deadline passed mid-{what} after {seconds:g}s (the connection was cut)")
    if guard.cut == TIMEOUT:
        raise Timeout(f"timed out after {seconds:g}s: the request timeout bounds the whole {what}")


def _status_failure(exc: openai.APIStatusError) -> StatusFailure:
    """The failure an error status stands for, its message read from the body as servers word it."""
    response = exc.response
    try:
        text = response.text
    except (httpx2.HTTPError, UnicodeDecodeError):
        text = exc.message
    try:
        body: Any = json.loads(text)
    except json.JSONDecodeError:
        body = None
    return StatusFailure(response.status_code, message_of(body, text), body, retry_after(response.headers))


def _connection_failure(exc: Exception, replied: bool, what: str) -> ConnectionFailure:
    """The failure a broken connection stands for: before any reply on a connection that was open (a
    kept-alive one the server had closed), the request never reached the server (`unsent`)."""
    cause = exc.__cause__ if isinstance(exc, openai.APIConnectionError) and exc.__cause__ else exc
    detail = f"{type(cause).__name__}: {cause}"
    if isinstance(cause, (httpx2.UnsupportedProtocol, httpx2.InvalidURL)):
        return ConnectionFailure(f"Connection impossible: {detail}", retryable=False)
    if replied:
        return ConnectionFailure(f"Connection broken mid-reply: the {what} broke off: {detail}")
    if isinstance(cause, httpx2.ConnectError):
        return ConnectionFailure(f"Connection failed: {cause}")
    if isinstance(cause, (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError)):
        return ConnectionFailure(f"Connection closed before a reply: {detail}", unsent=True)
    return ConnectionFailure(f"Connection failed: {detail}")
