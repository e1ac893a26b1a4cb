"""Limits on one LLM grading, kept apart from the agent loop so the CLI can show defaults without the SDK."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Budgets:
    """Limits on one grading. Exhausting any of them fails the group with the budget named."""

    turns: int = 24
    tokens: int = 400_000
    tool_output_chars: int = 300_000
    wall_seconds: float = 900.0
    repairs: int = 2
    request_timeout: float = 180.0
    retries: int = 4
    retry_wait_initial: float = 0.5
    retry_wait_max: float = 20.0
    max_output_tokens: int = 4096
