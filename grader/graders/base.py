"""What every grader is: a name and a `grade(workspace)` returning a ranking with reasons."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from grader.ranking import Ranking
from grader.workspace import Workspace


class GradingFailed(RuntimeError):
    """The grader could not produce a ranking; the group passes through unchanged with this reason.

    `details` carries what is known anyway (usage, transcript path), for the result.
    """

    def __init__(self, reason: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(reason)
        self.details = details or {}


@dataclass
class Grade:
    """A grader's verdict on one workspace.

    `ranking` holds tie groups of trajectory ids, best first, covering exactly `workspace.gradable()`.
    `rationales` and `signals` are per trajectory id; `details` is free-form (usage, transcript path, ...).
    """

    ranking: Ranking
    rationales: dict[str, str] = field(default_factory=dict)
    signals: dict[str, dict[str, Any]] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)


class Grader(Protocol):
    name: str

    def grade(self, workspace: Workspace) -> Grade: ...


GRADERS = ("heuristic", "llm")


def get_grader(name: str, **options: Any) -> Grader:
    """A grader by name: `heuristic` (the default, no LLM) or `llm` (options as in `LLMConfig`)."""
    if name == "heuristic":
        from grader.graders.heuristic import HeuristicGrader

        return HeuristicGrader(**options)
    if name == "llm":
        from grader.graders.llm import LLMGrader

        if "model" not in options:
            raise ValueError("the llm grader needs a model name")
        return LLMGrader(**options)
    raise ValueError(f"unknown grader {name!r}; available: {', '.join(GRADERS)}")
