"""How a call to the endpoint fails: the errors the agent loop sees (`EndpointFailed` and its kinds), and the
failures of one exchange the endpoint retries or adapts to (`Failure` and its kinds), with what an error body
or a `Retry-After` header says.
"""

from __future__ import annotations

import email.utils
import json
import math
import time
from typing import Any

from grader.errors import GagarError

TRANSIENT = frozenset({408, 429, 502, 503, 504})
"""Status codes of a passing condition: retried as they are, never blamed on an option of the request."""


class EndpointFailed(GagarError):
    """The endpoint gave no usable reply; the message is the reason in words (what the server answered, after
    how many attempts)."""


class ContextOverflow(EndpointFailed):
    """The server refused the conversation for not fitting the model's context (the message names the limit
    where the server gives it). Never retried: the caller shortens the conversation or fails.

    Attributes:
        limit: the model's context in tokens, where the server names one this endpoint believes, else None.
        prompt_tokens: the refused conversation's size in tokens, where the server names it, else None.
    """

    def __init__(self, reason: str, limit: int | None = None, prompt_tokens: int | None = None) -> None:
        super().__init__(reason)
        self.limit = limit
        self.prompt_tokens = prompt_tokens


class DeadlinePassed(EndpointFailed):
    """The call's deadline passed before a reply was complete (a request in flight is cut at its socket, so
    the server stops), or a retry's wait would have ended past it."""


class Failure(Exception):
    """One exchange failed; `retryable` says whether asking again may help."""

    retryable = True


class StatusFailure(Failure):
    """The server answered with an error status (or an error event inside a stream, or an error body with
    status 200). `retry_after`: the seconds the server asked to wait before asking again, if it said."""

    def __init__(self, status: int, message: str, body: Any = None, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}: {message}" if message else f"HTTP {status}")
        self.status, self.message, self.body = status, message, body
        self.retry_after = retry_after
        self.retryable = status in TRANSIENT or status >= 500


class ConnectionFailure(Failure):
    """The exchange broke at the connection. `unsent`: no byte of a reply came back on a connection that was
    open (the server had closed a kept-alive connection), so the request did not reach it."""

    def __init__(self, message: str, unsent: bool = False, retryable: bool = True) -> None:
        super().__init__(message)
        self.unsent, self.retryable = unsent, retryable


class Timeout(Failure):
    """The request timeout passed before the reply was complete (it bounds the whole request)."""


class Malformed(Failure):
    """A reply that is not what the chat format says (not JSON, a field of the wrong type): asked again, as a
    garbled transfer would be."""


class NoChoicesFailure(Failure):
    """A reply without choices: not retried as it is (a stream without choices is asked again whole)."""

    retryable = False


def message_of(body: Any, text: str) -> str:
    """The error message of an error body (OpenAI's `{"error": {"message"}}`, vLLM's `{"message"}`,
    FastAPI's `{"detail"}`), else the body's text (its first 500 characters)."""
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


def error_in_body(body: dict[str, Any], fallback: str) -> StatusFailure:
    """The failure an error body sent with status 200 or inside a stream stands for: its `error.code` as the
    status where that is an HTTP error status, else 500."""
    error = body.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    status = code if isinstance(code, int) and 400 <= code < 600 else 500
    return StatusFailure(status, message_of(body, fallback), body)


def retry_after(headers: Any) -> float | None:
    """The wait a response's headers ask for before the next request, in seconds: `retry-after-ms`, else
    `Retry-After` as seconds or as an HTTP date; None where neither is there or readable (a negative or
    non-finite value is no answer)."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            seconds = float(milliseconds) / 1000
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds) and seconds >= 0:
            return seconds
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - time.time()
        return max(0.0, seconds)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
