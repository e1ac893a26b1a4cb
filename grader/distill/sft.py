"""Transcripts as supervised fine-tuning examples, in the conversational format TRL's `SFTTrainer` takes.

An example is `{"messages": [...], "tools": "<JSON list>"}`: the system prompt and task exactly as the
grader sent them, each assistant turn with its tool calls (arguments as JSON objects: chat templates
serialize them themselves, so a string would be encoded twice), and each tool result exactly as the grader
sent it. `tools` is the JSON text of the tool schemas offered (TRL decodes a string; a list of schemas with
different parameters would not fit one Arrow column). The OpenAI fine-tuning format differs only in the
arguments, which it wants as JSON strings.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable
from typing import Any

from grader.errors import GagarError
from grader.graders.llm.tools import SUBMIT

Message = dict[str, Any]


class NotAnExample(GagarError, ValueError):
    """A transcript that cannot become a training example (the reason says why)."""


def messages_from_events(events: Iterable[dict[str, Any]]) -> list[Message]:
    """The conversation a grading held, rebuilt from its transcript events, ending at the submission: as the
    model last saw it, where the grader left messages out to fit the model's context ("left_out" events).

    Args:
        events: the transcript's events (`grader.graders.transcript`), of a native tool-calling grading.

    Returns:
        Chat messages: system, user, assistant (with `tool_calls`), tool (with `tool_call_id`, `name`).

    Raises:
        NotAnExample: a tool call's arguments are not a JSON object, or no ranking was submitted.
    """
    messages: list[Message] = []
    submitted = False
    for event in events:
        kind = event.get("type")
        if kind == "message" and event.get("role") in ("system", "user"):
            messages.append({"role": event["role"], "content": event.get("content") or ""})
        elif kind == "message" and event.get("role") == "assistant":
            message: Message = {"role": "assistant", "content": event.get("content") or ""}
            calls = []
            for call in event.get("tool_calls") or []:
                calls.append(_call(call))
                if call["name"] == SUBMIT:
                    break  # the loop ends at the submission: later calls in the turn were never run
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
        elif kind == "tool_result":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": event["call_id"],
                    "name": event["name"],
                    "content": event["content"],
                }
            )
        elif kind == "left_out":  # the grader shortened the conversation to fit the model's context
            for start, stop in sorted(event.get("slices") or [], reverse=True):
                del messages[int(start) : int(stop)]
        elif kind == "submitted":
            submitted = True
            break
    if not submitted:
        raise NotAnExample("the transcript ends without a valid submission")
    while messages and messages[-1]["role"] == "tool":  # results of calls made beside the submission
        messages.pop()
    return messages


def _call(call: dict[str, Any]) -> dict[str, Any]:
    arguments = call.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except json.JSONDecodeError:
            raise NotAnExample(f"the arguments of a {call['name']} call are not JSON") from None
    if not isinstance(arguments, dict):
        raise NotAnExample(f"the arguments of a {call['name']} call are not a JSON object")
    return {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": arguments}}


def example(messages: list[Message], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """One row of `sft.jsonl`.

    Args:
        messages: the conversation (`messages_from_events`).
        tools: the tool schemas offered, in the chat-completions format.

    Returns:
        `{"messages": messages, "tools": <tools as JSON text>}`.
    """
    return {"messages": messages, "tools": json.dumps(tools, sort_keys=True)}


def openai_example(row: dict[str, Any]) -> dict[str, Any]:
    """The same example in OpenAI's fine-tuning format (arguments as JSON strings, tools as a list).

    Args:
        row: a row of `sft.jsonl`.

    Returns:
        `{"messages": ..., "tools": [...], "parallel_tool_calls": true}`.
    """
    messages = []
    for message in row["messages"]:
        message = dict(message)
        if message["role"] == "tool":
            message.pop("name", None)  # OpenAI's tool messages carry the call id only
        if "tool_calls" in message:
            message["tool_calls"] = [_string_arguments(call) for call in message["tool_calls"]]
        messages.append(message)
    return {"messages": messages, "tools": json.loads(row["tools"]), "parallel_tool_calls": True}


def _string_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = call["function"]
    return {**call, "function": {**function, "arguments": json.dumps(function["arguments"])}}


def row_hash(row: dict[str, Any]) -> str:
    """What two exact duplicates share: a hash of the canonical JSON of the row."""
    return hashlib.sha256(json.dumps(row, sort_keys=True).encode()).hexdigest()


def split_tasks(tasks: Iterable[str], eval_fraction: float) -> set[str]:
    """The tasks that go to the eval split: the first `ceil(fraction * n)` in hash order (at least one
    when there are two tasks or more and the fraction is above 0; none when there is one).

    Args:
        tasks: task keys.
        eval_fraction: share of tasks held out, in [0, 1).

    Returns:
        The eval tasks.
    """
    unique = sorted(set(tasks), key=lambda key: hashlib.sha256(key.encode()).hexdigest())
    if eval_fraction <= 0 or len(unique) < 2:
        return set()
    count = min(len(unique) - 1, max(1, math.ceil(eval_fraction * len(unique))))
    return set(unique[:count])
