"""What a server turns out not to support, learnt once per endpoint: the optional parts of a request
(`stream`, `tool_choice`, `response_format`), which of them a refusal names or a lasting failure may be blamed
on, what is sent instead from then on, and the lessons that record it (the transcript's `learnt` events,
`details["endpoint"]`, `gagar show`).

- a refusal naming `stream`, `tool_choice` or `response_format` (a 4xx; for the last two also a 500) drops
  that option at once (`tool_choice` other than "auto" becomes "auto"; "required" with a single tool offered
  becomes the same choice in the other form, that tool named, unless that form was refused too);
- a server error that lasts through every retry of a request carrying `tool_choice` other than "auto",
  `response_format` or `stream` is tried once more without each of them before the call fails;
- a whole JSON reply to a streamed request, or a stream without choices, turns streaming off.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from grader.graders.llm.failures import TRANSIENT, Failure, StatusFailure

OPTIONS = ("tool_choice", "response_format", "stream")  # the order options are dropped in
_NAMES = {
    "tool_choice": re.compile(r"\btool_choice\b"),
    "response_format": re.compile(r"\bresponse_format\b"),
    "stream": re.compile(r"\bstream(?:ing|ed|_options)?\b", re.IGNORECASE),
}

ToolChoice = str | dict[str, Any]
"""A `tool_choice`: "auto", "required", "none", or {"type": "function", "function": {"name": ...}}."""
NAMED = "named function"
"""How a tool choice that names a function is called in lessons (its form, whatever the name)."""


def named_choice(name: str) -> dict[str, Any]:
    """The `tool_choice` that makes the model call the function `name`."""
    return {"type": "function", "function": {"name": name}}


def form_of(choice: ToolChoice | None) -> str | None:
    """A tool choice's form: its string, or NAMED for any choice that names a function."""
    return choice if isinstance(choice, str) or choice is None else NAMED


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


@dataclass
class Shape:
    """The optional parts of one call's request, as the endpoint's lessons leave them."""

    stream: bool
    tool_choice: ToolChoice | None
    response_format: dict[str, Any] | None
    only_tool: str | None = None
    """The name of the one tool the request offers, if it offers exactly one: "required" and that tool named
    then mean the same, so a server refusing one form can be sent the other."""

    def carries(self, option: str) -> bool:
        """Whether the request carries `option` (one of OPTIONS)."""
        if option == "tool_choice":
            return self.tool_choice is not None
        return bool(getattr(self, option))

    def droppable(self) -> list[str]:
        """Options a lasting server error may be blamed on ("auto" is what every server takes)."""
        return [o for o in OPTIONS if self.carries(o) and (o != "tool_choice" or self.tool_choice != "auto")]


def named_refusal(failure: StatusFailure, shape: Shape) -> str | None:
    """The option of the request a refusal names, if any: a 4xx naming it, or a 500 naming `tool_choice` or
    `response_format` (llama-cpp-python's server answers some forms of each so)."""
    if failure.status in TRANSIENT or not 400 <= failure.status <= 500:
        return None
    for option in OPTIONS:
        answerable = failure.status < 500 or option in ("tool_choice", "response_format")
        if answerable and shape.carries(option) and _NAMES[option].search(failure.message):
            return option
    return None


def blames_options(failure: Failure) -> bool:
    """Whether a failure that lasted may be the server refusing an option: a bad request, a validation error
    or a server error; not a passing condition (429, 502, 503, 504), a connection or a timeout."""
    if not isinstance(failure, StatusFailure) or failure.status in TRANSIENT:
        return False
    return failure.status in (400, 422) or failure.status >= 500


def _short(cause: str) -> str:
    return cause if len(cause) <= 300 else cause[:300] + "..."


class Lessons:
    """What one endpoint learnt its server refuses (thread-safe), and the shapes of requests that follows.

    Args:
        stream: whether replies are requested streamed until the server is seen not to stream.
    """

    def __init__(self, stream: bool) -> None:
        self._lock = threading.Lock()
        self._lessons: dict[tuple[str, str], Lesson] = {}
        self._refused_choices: set[str] = set()
        self.streams = stream
        self.takes_response_format = True

    def all(self) -> list[Lesson]:
        """What the endpoint learnt so far, in the order learnt."""
        with self._lock:
            return list(self._lessons.values())

    def shape(
        self,
        tool_choice: ToolChoice | None,
        response_format: dict[str, Any] | None,
        tools: list[dict[str, Any]] | None,
    ) -> Shape:
        """The optional parts of a request asking for these, as the lessons so far leave them."""
        only = tools[0]["function"]["name"] if tools is not None and len(tools) == 1 else None
        shape = Shape(stream=self.streams, tool_choice=tool_choice, response_format=None, only_tool=only)
        with self._lock:
            while shape.tool_choice is not None and form_of(shape.tool_choice) in self._refused_choices:
                shape.tool_choice = self._instead(shape)
            if self.takes_response_format:
                shape.response_format = response_format
        return shape

    def _instead(self, shape: Shape, tried: Iterable[str] = ()) -> ToolChoice | None:
        """What is sent in place of the shape's tool choice once it is refused (under `_lock`): the same
        choice in its other form where one tool is offered ("required" <-> that tool named), else "auto",
        else nothing; never a form refused before or in `tried` (forms this call already tried)."""
        excluded = self._refused_choices | set(tried)
        form = form_of(shape.tool_choice)
        if shape.only_tool is not None and form in ("required", NAMED):
            other: ToolChoice = named_choice(shape.only_tool) if form == "required" else "required"
            if form_of(other) not in excluded:
                return other
        if form == "auto" or "auto" in excluded:
            return None
        return "auto"

    def drop(self, shape: Shape, option: str, tried: Iterable[str] = ()) -> str:
        """Takes `option` out of `shape` (a tool choice is replaced as `_instead` says, never by a form in
        `tried`); returns the form taken out."""
        if option in ("stream", "response_format"):
            setattr(shape, option, False if option == "stream" else None)
            return option
        refused = form_of(shape.tool_choice) or "auto"
        with self._lock:
            shape.tool_choice = self._instead(shape, {refused, *tried})
        return refused

    def learn(self, option: str, form: str, cause: str) -> Lesson:
        """Remembers that the server refused `form` of `option` (the endpoint keeps one lesson of each).

        Returns:
            The lesson, for the transcript of the call that met it (each grading that meets it says so).
        """
        cause = _short(cause)
        with self._lock:
            if option == "stream":
                self.streams = False
                lesson = Lesson(option, "streamed replies", "replies are requested whole", cause)
            elif option == "response_format":
                self.takes_response_format = False
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
        return lesson

    def learn_context(self, tokens: int, cause: str) -> Lesson:
        """Remembers the model's context of `tokens`, as a refusal for not fitting it taught (replacing any
        limit learnt before)."""
        lesson = Lesson(
            "context",
            f"conversations over {tokens:,} tokens",
            "the final turn comes while the conversation still fits",
            _short(cause),
        )
        with self._lock:
            self._lessons.pop(("context", "limit"), None)
            self._lessons[("context", "limit")] = lesson
        return lesson

    def forget_context(self, refuted: int, held: int) -> Lesson:
        """Forgets the context limit learnt, which a request that held `held` tokens refuted.

        Returns:
            The lesson that says so (for the transcript; the endpoint keeps no lesson of the context then).
        """
        with self._lock:
            self._lessons.pop(("context", "limit"), None)
        return Lesson(
            "context",
            f"a context of {refuted:,} tokens",
            "forgotten: the limit is unknown again",
            f"a reply to a request of {held:,} tokens",
        )
