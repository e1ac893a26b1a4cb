"""A grading transcript read as steps a person follows: each tool call next to its result, labels decoded.

The transcript is a flat list of events (see `grader.graders.llm.agent`); a reader wants "the model asked for
the
diff of C-dary (clean, clean-respaced) and got this". Both the terminal and the HTML view render these steps.
Unknown event types are kept as raw JSON, so a newer transcript still shows everything.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

_DIFF_START = re.compile(r"^(diff --git |--- a/|@@ -\d)", re.MULTILINE)


def looks_like_diff(text: str) -> bool:
    return bool(_DIFF_START.search(text))


@dataclass
class ToolCall:
    call_id: str
    name: str
    arguments: str  # pretty JSON when it parses, else as the model sent it
    result: str | None = None
    error: bool = False
    seconds: float | None = None


@dataclass
class Step:
    """One thing that happened. `kind` is the event type, or `system`/`user`/`assistant` for messages."""

    t: float | None
    kind: str
    title: str
    body: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    problem: bool = False  # retries, invalid rankings, failures: drawn so they stand out


def _pretty(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return json.dumps(arguments, ensure_ascii=False)


def label_legend(labels: dict[str, list[str]], contrast: dict[str, str] | None = None) -> dict[str, str]:
    """label -> the trajectory ids it stands for, as text."""
    legend = {label: ", ".join(ids) for label, ids in labels.items()}
    legend.update({label: f"{tid} (failing, contrast)" for label, tid in (contrast or {}).items()})
    return legend


def _decode(ranking: Any, legend: dict[str, str]) -> str:
    if not isinstance(ranking, list):
        return str(ranking)
    tiers = []
    for rank, tier in enumerate(ranking, start=1):
        members = tier if isinstance(tier, list) else [tier]
        named = [f"{label} ({legend[label]})" if label in legend else str(label) for label in members]
        tiers.append(f"{rank}. {' = '.join(named)}")
    return "\n".join(tiers)


def _usage(usage: Any) -> str:
    if not isinstance(usage, dict):
        return "no usage reported"
    prompt, completion = usage.get("prompt_tokens") or 0, usage.get("completion_tokens") or 0
    return f"{prompt:,} prompt + {completion:,} completion tokens"


def to_steps(events: list[dict[str, Any]], legend: dict[str, str] | None = None) -> list[Step]:
    """The events as steps, tool results folded into the assistant turn that called them."""
    legend = dict(legend or {})
    steps: list[Step] = []
    pending: dict[str, ToolCall] = {}
    for event in events:
        kind = str(event.get("type", "?"))
        t = event.get("t")
        if kind == "start":
            legend.update(label_legend(event.get("labels") or {}, event.get("contrast") or {}))
            title = f"start: model {event.get('model')}, seed {event.get('seed')}"
            title += f", tool mode {event.get('tool_mode')}" if event.get("tool_mode") else ""
            body = "\n".join(f"{label} = {ids}" for label, ids in legend.items())
            steps.append(Step(t, kind, title, body))
        elif kind == "flag":
            lines = event.get("lines") or []
            title = f"flag: {event.get('flag')} in {event.get('trajectory')}"
            steps.append(Step(t, kind, title, "\n".join(map(str, lines)), problem=True))
        elif kind == "message":
            role = str(event.get("role", "?"))
            content = event.get("content") or ""
            if role == "assistant":
                calls = [
                    ToolCall(str(c.get("id")), str(c.get("name")), _pretty(c.get("arguments")))
                    for c in event.get("tool_calls") or []
                ]
                pending.update({c.call_id: c for c in calls})
                names = ", ".join(c.name for c in calls) or "no tool call"
                title = f"assistant, turn {event.get('turn', '?')}: {names}"
                steps.append(Step(t, "assistant", title, content, calls))
            else:
                steps.append(Step(t, role, f"{role} message ({len(content):,} characters)", content))
        elif kind == "tool_result":
            call_id = str(event.get("call_id"))
            call = pending.pop(call_id, None)
            if call is None:  # a result for a call the transcript did not record: show it on its own
                call = ToolCall(call_id, str(event.get("name")), "")
                steps.append(Step(t, kind, f"tool result {call.name}", calls=[call]))
            call.result = str(event.get("content") or "")
            call.error = bool(event.get("error"))
            call.seconds = event.get("seconds")
        elif kind == "response":
            title = f"response: {_usage(event.get('usage'))}, finish {event.get('finish_reason')}"
            if event.get("seconds") is not None:
                title += f", {event['seconds']:.3f}s"
            steps.append(Step(t, kind, title))
        elif kind == "retry":
            title = f"retry {event.get('attempt')}: {event.get('error')}"
            if event.get("sleep") is not None:
                title += f" (waits {event['sleep']}s)"
            steps.append(Step(t, kind, title, problem=True))
        elif kind == "learnt":  # something the endpoint refused, and what is sent instead from now on
            title = f"learnt: {event.get('refused')} refused; {event.get('instead')}"
            steps.append(Step(t, kind, title, f"from: {event.get('cause')}"))
        elif kind == "endpoint":  # what earlier gradings had learnt of the endpoint
            lessons = [e for e in event.get("learnt") or [] if isinstance(e, dict)]
            body = "\n".join(
                f"{e.get('refused')}: {e.get('instead')} (from: {e.get('cause')})" for e in lessons
            )
            steps.append(Step(t, kind, f"endpoint: {len(lessons)} thing(s) learnt before this grading", body))
        elif kind in ("resent", "fallback"):
            title = (
                f"sent again at once (a stale connection): {event.get('error')}"
                if kind == "resent"
                else f"tried once without {event.get('without')} after: {event.get('after')}"
            )
            steps.append(Step(t, kind, title, problem=True))
        elif kind == "left_out":  # the conversation overflowed the model's context: its oldest turns went
            slices = event.get("slices") or []
            count = sum(int(stop) - int(start) for start, stop in slices)
            title = f"left out {count} message(s) to fit the model's context, then the final turn"
            steps.append(Step(t, kind, title, str(event.get("reason") or ""), problem=True))
        elif kind == "invalid_ranking":
            title = f"invalid ranking (repair {event.get('repair')}): {event.get('problem')}"
            steps.append(Step(t, kind, title, problem=True))
        elif kind == "submitted":
            call = pending.pop(str(event.get("call_id")), None)
            if call is not None:  # a valid ranking gets no tool result: the submission is the answer
                call.result = "accepted"
            title = f"submitted ranking, confidence {event.get('confidence')}"
            steps.append(Step(t, kind, title, _decode(event.get("ranking"), legend)))
        elif kind == "failed":
            steps.append(Step(t, kind, f"failed: {event.get('reason')}", problem=True))
        else:
            rest = {k: v for k, v in event.items() if k not in ("t", "type")}
            steps.append(Step(t, kind, kind, json.dumps(rest, ensure_ascii=False, indent=1, default=str)))
    return steps


def readable_steps(events: list[dict[str, Any]], source: object) -> tuple[list[Step] | None, str]:
    """`to_steps`, or None and a note naming `source` when an event has fields of the wrong shape (a
    hand-edited or damaged transcript): one bad transcript costs its group's detail, not the view."""
    try:
        return to_steps(events), ""
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        return None, f"transcript damaged: {source}: an event cannot be read ({type(exc).__name__}: {exc})"
