"""What a chat-completions server answered, read into the `Reply` the agent loop sees: a whole completion or
the chunks of a streamed one, as the `openai` SDK built them (its models keep a field of the wrong type as the
server sent it) or as plain JSON (a whole reply to a streamed request). A reply is the server's data: a field
of a type the chat format does not have raises TypeError or ValueError here, which the transport reports as a
malformed reply, never as an error of the grader.
"""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass
from typing import Any


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
    prompt_token_seconds: float | None = None
    """Seconds the server took per prompt token it processed (not served from its cache), where it reports
    its timings (llama.cpp's `timings.prompt_ms` and `prompt_n`); None elsewhere."""

    @property
    def context_tokens(self) -> int | None:
        """Tokens the request held in the model's context (prompt plus completion, as reported), or None
        where the server reported neither."""
        if self.usage is None:
            return None
        return sum(self.usage.get(k) or 0 for k in ("prompt_tokens", "completion_tokens"))


class NoChoices(Exception):
    """A reply without choices (llama-cpp-python's server streams so under `chatml-function-calling`)."""


def field_of(value: Any, name: str) -> Any:
    """A field of a server object: a key of a dict, an attribute of an SDK model (fields the SDK does not
    know included: llama.cpp's `timings`, an `error` sent with status 200); None where there is none."""
    if isinstance(value, dict):
        return value.get(name)
    if value is None or isinstance(value, (str, int, float, bool, list)):
        return None
    return getattr(value, name, None)


def plain(value: Any) -> Any:
    """A server object as plain JSON values: an SDK model as the dict the server sent (its fields of a wrong
    type kept as sent), a dict or a list as it is."""
    to_dict = getattr(value, "to_dict", None)
    return to_dict(warnings=False) if callable(to_dict) and not isinstance(value, dict) else value


def usage_of(value: Any) -> dict[str, Any] | None:
    """The usage a reply reports: a dict with an integer `prompt_tokens` or `completion_tokens`, neither of
    them anything else (the grader adds both to its token budget); else None."""
    value = plain(value)
    if not isinstance(value, dict):
        return None
    counts = [value.get(k) for k in ("prompt_tokens", "completion_tokens")]
    if any(c is not None and (not isinstance(c, int) or isinstance(c, bool)) for c in counts):
        return None
    return value if any(c is not None for c in counts) else None


def cached_tokens_of(usage: dict[str, Any] | None, timings: Any) -> int:
    """Prompt tokens the server took from its prefix cache: OpenAI's and vLLM's (with
    `--enable-prompt-tokens-details`) `usage.prompt_tokens_details.cached_tokens`, else llama.cpp's
    `timings.cache_n`; 0 where neither is reported as a finite number."""
    details = (usage or {}).get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if cached is None:
        cached = field_of(plain(timings), "cache_n")
    finite = isinstance(cached, int) or (isinstance(cached, float) and math.isfinite(cached))
    return int(cached) if finite else 0


def prompt_token_seconds_of(timings: Any) -> float | None:
    """Seconds per processed prompt token from llama.cpp's `timings` (`prompt_ms` over `prompt_n`), or None
    where they are missing, not finite, or too few tokens were processed to time (under 256)."""
    timings = plain(timings)
    milliseconds, processed = field_of(timings, "prompt_ms"), field_of(timings, "prompt_n")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (milliseconds, processed))
    if not numbers or not math.isfinite(milliseconds) or not 256 <= processed < math.inf or milliseconds < 0:
        return None
    return milliseconds / 1000 / processed


def text_of(value: Any) -> str | None:
    """A message's content: a string, or the text of its parts where a server sends a list.

    Raises:
        TypeError: a part's text is not a string.
    """
    if isinstance(value, list):
        value = "".join(field_of(p, "text") or "" for p in value) or None
    return value if isinstance(value, str) or value is None else str(value)


def _call_id(value: Any) -> str:
    return value if isinstance(value, str) and value else f"call-{secrets.token_hex(4)}"


def _listed(value: Any, what: str) -> list[Any]:
    """A list field of a reply (None: empty). Raises TypeError for anything else, naming the field."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"{what} is a {type(value).__name__}, not a list")
    return value


def reply_of_completion(completion: Any) -> Reply:
    """The reply a whole chat.completion holds (its first choice), an SDK `ChatCompletion` or its JSON.

    Raises:
        NoChoices: it has no choice.
        TypeError, ValueError: a field of a type the chat format does not have.
    """
    choices = field_of(completion, "choices")
    if not isinstance(choices, list) or not choices or isinstance(choices[0], (str, int, float, list)):
        raise NoChoices("the endpoint returned no choices")
    choice = choices[0]
    message = field_of(choice, "message")
    calls = _listed(field_of(message, "tool_calls"), "tool_calls")
    legacy = field_of(message, "function_call")
    if not calls and legacy is not None:  # the legacy single-call form
        calls = [{"function": legacy}]
    tool_calls = []
    for call in calls:
        function = field_of(call, "function")
        arguments = plain(field_of(function, "arguments"))
        tool_calls.append(
            ToolCall(
                _call_id(field_of(call, "id")),
                str(field_of(function, "name") or ""),
                "" if arguments is None else arguments,
            )
        )
    usage = usage_of(field_of(completion, "usage"))
    return Reply(
        content=text_of(plain(field_of(message, "content"))),
        tool_calls=tuple(tool_calls),
        finish_reason=str(field_of(choice, "finish_reason") or "stop"),
        usage=usage,
        cached_tokens=cached_tokens_of(usage, field_of(completion, "timings")),
        prompt_token_seconds=prompt_token_seconds_of(field_of(completion, "timings")),
    )


class StreamAssembly:
    """The reply the chunks of a stream add up to: content, tool calls by index (arguments concatenated; an
    object given whole is kept), finish reason, usage and llama.cpp's timings. A chunk without choices (the
    usage chunk; every chunk of llama-cpp-python's server) adds only what it carries besides."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish: str | None = None
        self.usage: dict[str, Any] | None = None
        self.timings: Any = None
        self.choices = 0

    def add(self, chunk: Any) -> None:
        """Adds one chunk (an SDK `ChatCompletionChunk` or its JSON).

        Raises:
            TypeError, ValueError: a field of a type the chat format does not have.
        """
        timings = field_of(chunk, "timings")
        if timings:
            self.timings = timings
        usage = usage_of(field_of(chunk, "usage"))
        if usage is not None:
            self.usage = usage
        choices = field_of(chunk, "choices")
        if not isinstance(choices, list) or not choices or isinstance(choices[0], (str, int, float, list)):
            return
        choice = choices[0]
        self.choices += 1
        self.finish = field_of(choice, "finish_reason") or self.finish
        delta = field_of(choice, "delta")
        text = text_of(plain(field_of(delta, "content")))
        if text:
            self.content.append(text)
        for piece in _listed(field_of(delta, "tool_calls"), "tool_calls"):
            if isinstance(piece, (str, int, float, list)) or piece is None:
                continue
            index = field_of(piece, "index") or 0
            call = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
            call["id"] = field_of(piece, "id") or call["id"]
            function = field_of(piece, "function")
            if function is not None:
                call["name"] = call["name"] or field_of(function, "name") or ""
                arguments = plain(field_of(function, "arguments"))
                if isinstance(arguments, str):
                    call["arguments"] += arguments
                elif arguments is not None:
                    call["arguments"] = json.dumps(arguments)

    def reply(self) -> Reply:
        """The reply so far.

        Raises:
            NoChoices: no chunk carried a choice.
        """
        if not self.choices:
            raise NoChoices("the streamed reply carried no choices")
        calls = tuple(
            ToolCall(_call_id(call["id"]), str(call["name"]), call["arguments"])
            for _, call in sorted(self.calls.items())
        )
        return Reply(
            content="".join(self.content) or None,
            tool_calls=calls,
            finish_reason=str(self.finish or "stop"),
            usage=self.usage,
            cached_tokens=cached_tokens_of(self.usage, self.timings),
            prompt_token_seconds=prompt_token_seconds_of(self.timings),
        )
