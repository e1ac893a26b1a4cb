"""llama-cpp-python's own server, `python -m llama_cpp.server --chat_format chatml-function-calling`, as a
second real server (built or reused by grader.llamacpp_python; else skipped, with why), serving Gemma 3 270M.

What it does on the wire, which the LLM grader's transport has to live with, is asserted here against the
real server, so an imitation of it elsewhere cannot drift from it unseen."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from grader.llamacpp_python import LlamaCppPythonServer
from tests.llama_support import grade_with_defaults

TOOL = {
    "type": "function",
    "function": {
        "name": "diff",
        "description": "Show a diff.",
        "parameters": {
            "type": "object",
            "properties": {"candidate": {"type": "string", "enum": ["C-ab12", "C-cd34"]}},
            "required": ["candidate"],
        },
    },
}
ASK = [{"role": "user", "content": "Look at C-ab12."}]


def post(server: LlamaCppPythonServer, body: dict[str, Any]) -> tuple[int, str, bytes]:
    """POST a chat completion; the status, the content type and the raw body (error statuses too)."""
    request = urllib.request.Request(
        f"{server.url}/chat/completions",
        data=json.dumps({"model": server.alias, "messages": ASK, "max_tokens": 16, **body}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=240) as reply:
            return reply.status, reply.headers.get("Content-Type", ""), reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read()


def events(body: bytes) -> list[str]:
    """The data of each server-sent event in a streamed body."""
    return [line[5:].strip() for line in body.decode().splitlines() if line.startswith("data:")]


def test_grading_the_bundled_example_with_default_options(
    llama_cpp_python_server: LlamaCppPythonServer, tmp_path: Path
) -> None:
    printed, result, transcript = grade_with_defaults(
        llama_cpp_python_server.url, llama_cpp_python_server.alias, tmp_path / "run"
    )
    responses = [e for e in transcript if e["type"] == "response"]
    assert responses, "no reply from the server reached the loop"
    assert result.group_id in printed
    if result.status == "graded":
        assert sorted(t for tier in result.ranking for t in tier) == sorted(result.weights)
    else:
        assert result.status == "failed" and result.reason
        assert result.advantages_after == result.advantages_before
