"""The grader boundary: what a grader is (`Grader`), what it returns (`Grade`), and the registry of graders.

The pipeline gives a grader a read-only `GradingView` of one group's workspace and gets back a `Grade`, which
it validates and turns into weights. Everything the pipeline uses is a typed field of `Grade`; `details`
holds a grader's free-form extras, written to the result and never read by the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from grader.errors import GradingFailed
from grader.graders.llm.config import LLMConfig
from grader.ranking.order import Ranking
from grader.sandbox.base import BACKENDS
from grader.util.registry import Registry
from grader.workspace.view import GradingView


@dataclass
class Grade:
    """A grader's verdict on one group."""

    ranking: Ranking
    """Tie groups of trajectory ids, best first, covering exactly `view.gradable()` once each."""
    rationales: dict[str, str] = field(default_factory=dict)
    """Per trajectory id: why it is where it is, in a sentence or two."""
    signals: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per trajectory id: what the grader measured (shown by `gagar show` and the report)."""
    usage: dict[str, int] = field(default_factory=dict)
    """Model usage (requests, tokens, tool calls, retries), for graders that call a model."""
    transcript: str | None = None
    """Path of the grading's transcript, when one was written."""
    flags: dict[str, list[str]] = field(default_factory=dict)
    """Per trajectory id: lines of its patch that address the grader instead of the code."""
    certainty: float | None = None
    """How far to trust the ranking, in [0, 1]; None means fully. The pipeline pulls the scheme's weights
    toward uniform by it (`redistribute.shrink_weights`: w' = 1 - certainty * (1 - w)), so an unsure grader
    moves less credit, and reports it as `details["weight_shrink"]`."""
    details: dict[str, Any] = field(default_factory=dict)
    """Free-form extras for the result (model, seed, labels, ...); the pipeline never reads them."""

    def __post_init__(self) -> None:
        if self.certainty is not None and not 0.0 <= self.certainty <= 1.0:
            raise ValueError(f"Grade.certainty must be in [0, 1], got {self.certainty!r}")


@runtime_checkable
class Grader(Protocol):
    """What every grader is. Graders must be thread-safe: one instance grades many groups at once."""

    name: str
    """Short name, recorded in every result."""

    def fingerprint(self) -> str:
        """Everything that changes this grader's grades (model, prompts, tool schemas, options, version),
        as a string: the grade cache keys on it. Two graders with equal fingerprints grade alike."""
        ...

    def grade(self, view: GradingView) -> Grade:
        """Rank `view.gradable()`, best first.

        Args:
            view: the group, read-only: its candidates, their classes and stats, diffs, files, search, the
                tree source a sandbox needs, and the process's resources (hold `view.resources.llm` around
                model requests and `view.resources.sandbox` per open sandbox).
        Returns:
            a `Grade` whose ranking covers exactly `view.gradable()`; the pipeline validates it.
        Raises:
            GradingFailed: no ranking could be made (a budget ran out, the endpoint failed, no valid
                submission); the group passes through unchanged with the reason and `GradingFailed.details`.
        Any other exception is a bug in the grader: the pipeline fails that group only, naming the error.
        """
        ...


GRADERS: Registry[Grader] = Registry("grader")
"""Every grader by name; `gagar grade --grader NAME` and `get_grader(NAME)` look here."""


def register_grader(name: str, config: type | None = None) -> Callable[[Callable[..., Grader]], Any]:
    """Decorator: register a grader class (or factory) under `name`, with the config dataclass whose fields
    are its keyword options (a docstring under each field becomes its `--help`)."""
    return GRADERS.register(name, config)


@dataclass
class HeuristicConfig:
    """The built-in heuristic grader (the default): ranks passing candidates by hygiene and scope signals
    read off the workspace and, where the task has an environment, by what running them showed (no model)."""

    evidence: Literal["auto", "off"] = "auto"
    """Run the candidates first (statement probes, existing tests) when the task names an environment
    (image, python or recipe): auto; off reads the diffs only."""
    evidence_budget: float = 300.0
    """Seconds the evidence stage may take per group (wall time)."""
    evidence_sandbox: str = field(default="docker", metadata={"choices": BACKENDS.names})
    """The sandbox backend the evidence stage runs in (docker builds the task's environment)."""


GRADERS.add("heuristic", "grader.graders.heuristic:HeuristicGrader", HeuristicConfig)
GRADERS.add("llm", "grader.graders.llm.agent:LLMGrader", LLMConfig)


def get_grader(name: str, **options: Any) -> Grader:
    """A registered grader by name: `heuristic` (the default, no LLM) or `llm` (options as in `LLMConfig`).

    Raises UnknownName (a ValueError) for an unknown name, ValueError for an option the grader does not take
    or a missing required one (the llm grader needs `model`).
    """
    return GRADERS.create(name, **options)


__all__ = ["GRADERS", "Grade", "Grader", "GradingFailed", "HeuristicConfig", "get_grader", "register_grader"]
