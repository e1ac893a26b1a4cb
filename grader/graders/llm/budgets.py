"""Limits on one LLM grading, kept apart from the agent loop so the CLI can show defaults without the SDK."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Budgets:
    """Limits on one grading. Exhausting any of them fails the group with the budget named."""

    turns: int = field(default=24, metadata={"cli": "--max-turns"})
    """Model turns (requests that are answered)."""
    tokens: int = field(
        default=400_000, metadata={"cli": "--max-grading-tokens", "cli_deprecated": "--max-tokens"}
    )
    """Prompt plus completion tokens over the whole grading, every turn summed (the per-turn cap is
    --max-tokens-per-turn)."""
    tool_output_chars: int = field(default=300_000, metadata={"cli": "--max-tool-output-chars"})
    """Characters of tool output sent to the model over the whole grading."""
    wall_seconds: float = field(default=900.0, metadata={"cli": "--max-seconds"})
    """Wall time of one grading on the model's side: not counting waits for an LLM or sandbox slot, the
    building of the task's environment, nor the time `run`'s commands take (--max-sandbox-seconds)."""
    sandbox_seconds: float = field(default=1800.0, metadata={"cli": "--max-sandbox-seconds"})
    """Wall time `run`'s commands may take over one grading (each target's setup included, the building of
    the task's environment not). A run's per-target timeout is cut so that it ends within what is left;
    once it is spent, `run` says so and the other tools still work. The default holds 3 runs of a task's
    tests on a benchmark group (12 targets of 100 s, two at a time) and the probes between them."""
    repairs: int = field(default=2, metadata={"cli": "--max-repairs"})
    """Invalid rankings sent back to the model for repair before the grading fails."""
    request_timeout: float = 300.0
    """Seconds one request may take. A server that does not stream sends nothing until the whole reply is
    written: on 2 loaded cores llama-cpp-python took over 180 s for a forced submit_ranking call of Gemma 3
    270M (its grammar sampling ran at about 1 token/s), and a timeout there costs a resend behind the
    abandoned generation, which it does not stop."""
    retries: int = 4
    """Retries of a request that failed for a transient reason (429, 5xx, connection). A server error that
    lasts through them is then tried once without each optional field the request carries (a tool_choice
    other than "auto", response_format, stream) before the grading fails."""
    retry_wait_initial: float = 0.5
    """First wait between retries, in seconds (exponential with jitter after it)."""
    retry_wait_max: float = 20.0
    """Longest wait between retries, in seconds."""
    max_output_tokens: int = field(
        default=1024, metadata={"cli": "--max-tokens-per-turn", "cli_deprecated": "--max-output-tokens"}
    )
    """Tokens the model may generate in one turn (the request's `max_tokens`; the whole grading's budget is
    --max-grading-tokens). A turn is a tool call and a few lines of reasoning, which instruct models write in
    a few hundred; raise it for models that think at length before each call. A model that writes on (a base
    model echoing its prompt) costs at most this much a turn."""
