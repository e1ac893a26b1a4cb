"""The LLM grader: an agent on any OpenAI-compatible endpoint that compares the passing candidates side by
side with tools, and submits a ranking. `agent` (LLMGrader and its loop), `endpoint` (the one call to a
server), `tools` (list, diff, read, search, run, submit), `config` and `budgets` (its options), `prompts`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.util.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "LLMGrader": "grader.graders.llm.agent",
    "Budgets": "grader.graders.llm.budgets",
    "LLMConfig": "grader.graders.llm.config",
    "Endpoint": "grader.graders.llm.endpoint",
    "EndpointFailed": "grader.graders.llm.endpoint",
    "candidates_may_fail": "grader.graders.llm.agent",
    "ALL_PASS_CLAIM": "grader.graders.llm.agent",
}

if TYPE_CHECKING:
    from grader.graders.llm.agent import ALL_PASS_CLAIM, LLMGrader, candidates_may_fail
    from grader.graders.llm.budgets import Budgets
    from grader.graders.llm.config import LLMConfig
    from grader.graders.llm.endpoint import Endpoint, EndpointFailed

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "ALL_PASS_CLAIM",
    "Budgets",
    "Endpoint",
    "EndpointFailed",
    "LLMConfig",
    "LLMGrader",
    "candidates_may_fail",
]
