"""What the LLM grader's tests script the model to do: the budgets they grade under and the policies a
`ScriptedServer` plays (tests/graders/test_llm_grader.py and test_endpoint.py share them)."""

from __future__ import annotations

from typing import Any

from grader.graders.llm.agent import Budgets
from grader.servers.scripted import Reply, labels_in, read_every_diff_then_rank, tool_calls

FAST = Budgets(retry_wait_initial=0.01, retry_wait_max=0.05, request_timeout=10, retries=3, turns=8)


def submit(order: list[list[str]], confidence: float = 0.8) -> Reply:
    reasons = {label: f"reason for {label}" for tier in order for label in tier}
    return tool_calls(("submit_ranking", {"ranking": order, "reasons": reasons, "confidence": confidence}))


def inspector(request: dict[str, Any], n: int) -> Reply:
    """Lists, diffs every candidate in parallel, reads and searches, then ranks by diff size."""
    reads = [
        ("read_file", {"target": "base", "path": "inventory/stock.py", "start_line": 18}),
        ("search", {"target": labels_in(request)[0], "pattern": "def average_price"}),
    ]
    return read_every_diff_then_rank(request, reads, lambda label, i, count: f"reason for {label}")
