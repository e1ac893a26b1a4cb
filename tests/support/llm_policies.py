"""What the LLM grader's tests script the model to do: the budgets they grade under and the policies a
`ScriptedServer` plays, and the helpers that read what a grading did (tests/graders/test_llm_grader.py,
test_endpoint.py and test_endpoint_limits.py share them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader.graders.llm.agent import Budgets, LLMGrader
from grader.graders.transcript import read_transcript
from grader.groups.formats import load_group_file
from grader.groups.models import GroupResult
from grader.pipeline import grade_group_sync
from grader.servers.scripted import Reply, ScriptedServer, labels_in, read_every_diff_then_rank, tool_calls
from tests.conftest import EXAMPLE_GROUP

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


MESSAGES = [{"role": "user", "content": "Hello."}]
"""The smallest conversation an endpoint test sends."""


def grade_twice(
    server: ScriptedServer, tmp_path: Path, **options: Any
) -> tuple[list[GroupResult], list[list[dict[str, Any]]]]:
    """The bundled example graded twice by one grader (one endpoint), each grading's requests apart."""
    (group,) = load_group_file(EXAMPLE_GROUP)
    settings: dict[str, Any] = {"budgets": FAST, "sandbox": None, "seed": 7, **options}
    grader = LLMGrader("scripted", base_url=server.url, **settings)
    results, requests = [], []
    for n in range(2):
        before = len(server.requests)
        folder = tmp_path / f"grading{n}"
        grader.config.transcript_dir = folder
        results.append(grade_group_sync(group, grader))
        requests.append(server.requests[before:])
    return results, requests


def events_of(result: GroupResult, kind: str) -> list[dict[str, Any]]:
    assert result.transcript, result.reason
    return [e for e in read_transcript(result.transcript) if e["type"] == kind]
