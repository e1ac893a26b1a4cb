"""What a model's reply holds, read for the agent loop: its tool calls (native, or JSON written in its text),
arguments as the history carries them, a call as a comparable key, the note on a reply cut at a limit, and
the `response_format` that holds a reply to one tool call.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from grader.graders.llm.endpoint import Reply
from grader.graders.llm.tools import SUBMIT, Markers, Toolbox
from grader.util.jsontext import loads

CUT = "Your reply was cut at the limit of {limit} tokens a turn: keep replies and arguments shorter. "
CUT_AT_CONTEXT = "Your reply was cut where the model's context ends: keep replies and arguments shorter. "
"""Told for a reply cut with fewer tokens written than the turn allowed: llama-server reports `length` for a
reply the end of its context cut as for one the per-turn limit cut."""

Call = tuple[str, str, Any]
"""A tool call as the loop handles it: (call id, tool name, arguments as sent)."""


def aside(cut: str) -> str:
    """A cut note as an aside to an error message ("" for none)."""
    return f" ({cut.strip()})" if cut else ""


def text_tool_call(content: str | None) -> tuple[str, Any] | None:
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
            data = loads(text)
        except ValueError:  # not JSON, or nested deeper than the reader goes
            continue
        if isinstance(data, dict) and isinstance(data.get("tool"), str):
            return data["tool"], data.get("arguments", {})
    return None


def tool_calls_of(reply: Reply, native: bool, markers: Markers) -> list[Call]:
    """A reply's tool calls: native ones, else one written as JSON in its text (with a fresh call id)."""
    if native and reply.tool_calls:
        return [(c.id, c.name, c.arguments) for c in reply.tool_calls]
    parsed = text_tool_call(reply.content)
    if parsed is not None:
        return [(f"text-{markers()[:6]}", parsed[0], parsed[1])]
    return []


def reply_format(toolbox: Toolbox, only_submit: bool, final: bool = False) -> dict[str, Any]:
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


def call_key(name: str, arguments: Any) -> str:
    """A tool call as one comparable string: its name and its arguments, decoded where they are JSON (as
    sent where they are not, or nest too deep to write again)."""
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            decoded = loads(arguments or "{}")
            return f"{name} {_json_or_note(decoded, sort_keys=True)}"
        return f"{name} {arguments}"
    return f"{name} {_json_or_note(arguments, sort_keys=True)}"


def cut_note(reply: Reply, limit: int) -> str:
    """What the next message tells the model of its reply, if the reply was cut: at the per-turn limit, or
    (fewer tokens written than the `limit` the turn allowed, where the server reports its usage) where the
    model's context ends; "" for a reply that ended on its own."""
    if reply.finish_reason != "length":
        return ""
    written = (reply.usage or {}).get("completion_tokens")
    return CUT_AT_CONTEXT if isinstance(written, int) and written < limit else CUT.format(limit=limit)


def arguments_text(arguments: Any) -> str:
    """A tool call's arguments as the JSON string the chat format expects in the history (some servers send
    an object). Arguments that are not a JSON object (a reply cut mid-call) go back as one that holds their
    text, {"invalid_json": ...}: llama-server parses every call of the history and answers HTTP 500 "Failed to
    parse tool call arguments as JSON" to each later turn otherwise (a default-options grading failed so when
    Gemma 3 270M's reply was cut at the turn limit inside a call). The call's result says what was wrong."""
    if not isinstance(arguments, str):
        return _json_or_note(arguments)
    try:
        parsed = loads(arguments or "{}")
    except ValueError:  # not JSON, or nested deeper than the reader goes
        parsed = None
    return arguments if isinstance(parsed, dict) else json.dumps({"invalid_json": arguments})


def _json_or_note(value: Any, sort_keys: bool = False) -> str:
    """`value` as JSON, or, where it nests deeper than the writer goes, a JSON object that says so."""
    try:
        return json.dumps(value, sort_keys=sort_keys)
    except (RecursionError, ValueError, TypeError):
        return json.dumps({"invalid_json": "(nested deeper than the JSON writer goes)"})
