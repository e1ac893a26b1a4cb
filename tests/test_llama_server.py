"""A real llama.cpp server (built or reused by grader.llamacpp; else skipped, with why)."""

from __future__ import annotations

import time
from pathlib import Path

from grader.formats import load_group_file
from grader.graders.llm import Budgets, LLMGrader
from grader.llamacpp import LlamaServer
from grader.pipeline import grade_group_sync
from grader.transcript import read_transcript
from tests.conftest import EXAMPLE_GROUP

TOOL_OUTPUT = '<<<DATA 1a2b>>>\n-    return a - b\n+    return a + b  # a & b < c > d "q"\n<<<END 1a2b>>>'
DIFF_TOOL = {
    "type": "function",
    "function": {
        "name": "diff",
        "description": "Show a diff.",
        "parameters": {"type": "object", "properties": {"candidate": {"type": "string"}}},
    },
}


def test_tool_results_reach_the_prompt_intact_and_unescaped(llama_server: LlamaServer) -> None:
    conversation = [
        {"role": "system", "content": "Grade."},
        {"role": "user", "content": "Look at C-ab12."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "diff", "arguments": '{"candidate":"C-ab12"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": TOOL_OUTPUT},
    ]
    prompt = llama_server.post("/apply-template", {"messages": conversation, "tools": [DIFF_TOOL]})["prompt"]
    assert TOOL_OUTPUT in prompt  # byte for byte: not dropped, not HTML-escaped
    assert "&lt;" not in prompt and "&amp;" not in prompt


def test_the_tool_choice_forms_it_accepts(llama_server: LlamaServer) -> None:
    for choice in ("auto", "none", "required"):
        reply = llama_server.post(
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "Call diff."}],
                "tools": [DIFF_TOOL],
                "tool_choice": choice,
                "max_tokens": 8,
            },
        )
        assert reply["choices"][0]["finish_reason"] in ("length", "stop", "tool_calls"), choice
        # llama.cpp reports its prefix-cache hits where the loop can record them.
        assert "cached_tokens" in reply["usage"]["prompt_tokens_details"]


def test_grading_the_bundled_example_ends_within_its_budget(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    (group,) = load_group_file(EXAMPLE_GROUP)
    budgets = Budgets(turns=3, max_output_tokens=96, wall_seconds=45, request_timeout=30, retries=0)
    grader = LLMGrader(
        "gemma-3-270m",
        base_url=llama_server.url,
        sandbox=None,
        seed=1,
        budgets=budgets,
        transcript_dir=tmp_path,
    )
    started = time.monotonic()
    result = grade_group_sync(group, grader)
    elapsed = time.monotonic() - started
    assert elapsed < 45 + 5
    # A 270M base model: a validated ranking or a clear failure, with the group passed through unchanged.
    if result.status != "graded":
        assert result.status == "failed" and result.reason
        assert result.advantages_after == result.advantages_before
    events = read_transcript(result.transcript)
    assert sum(e["type"] == "response" for e in events) >= 1


def test_cached_prompt_tokens_are_recorded(llama_server: LlamaServer) -> None:
    (group,) = load_group_file(EXAMPLE_GROUP)
    budgets = Budgets(turns=2, max_output_tokens=16, wall_seconds=40, request_timeout=30, retries=0)
    grader = LLMGrader("gemma-3-270m", base_url=llama_server.url, sandbox=None, seed=2, budgets=budgets)
    result = grade_group_sync(group, grader)
    # The second turn re-sends the first turn's prompt: llama.cpp serves it from its prefix cache.
    assert 0 < result.usage["cached_prompt_tokens"] < result.usage["prompt_tokens"]
