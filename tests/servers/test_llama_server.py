"""A real llama.cpp server (built or reused by grader.servers.llamacpp; else skipped, with why), serving Gemma
3 270M with the chat template gagar ships for tool calls (prompts/gemma3_tools.jinja)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from grader.graders.llm.agent import Budgets
from grader.graders.transcript import read_transcript
from grader.groups.formats import load_group_file
from grader.groups.models import GroupResult
from grader.pipeline import grade_group_sync
from grader.servers.llamacpp import LlamaServer
from tests.conftest import EXAMPLE_GROUP, llm_grader
from tests.support.llama_support import DIFF_TOOL, THREADS, grade_with_defaults

TOOL_OUTPUT = '<<<DATA 1a2b>>>\n-    return a - b\n+    return a + b  # a & b < c > d "q"\n<<<END 1a2b>>>'


def one_tool_round(label: str, output: str) -> list[dict[str, Any]]:
    """A user's request, the model's native `diff` call and its result: one round of a tool loop."""
    function = {"name": "diff", "arguments": json.dumps({"candidate": label})}
    call = {"id": f"call-{label}", "type": "function", "function": function}
    return [
        {"role": "user", "content": f"Look at {label}."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": output},
    ]


def grade(
    server: LlamaServer, tmp_path: Path, structured: bool = True, **budget: Any
) -> tuple[GroupResult, list[dict[str, Any]]]:
    """Grade the bundled example with the model in structured text mode (a base model calls no tool on its
    own; constrained to one JSON tool call a turn, it does); returns the result and its transcript."""
    (group,) = load_group_file(EXAMPLE_GROUP)
    budgets = Budgets(**{"request_timeout": 240, "retries": 0, "wall_seconds": 600, **budget})
    grader = llm_grader(
        server.url,
        tmp_path,
        model="gemma-3-270m",
        seed=1,
        budgets=budgets,
        tool_mode="text",
        structured=structured,
    )
    result = grade_group_sync(group, grader)
    assert result.transcript, result.reason
    return result, read_transcript(result.transcript)


def parsed_calls(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [call for e in events if e["type"] == "message" for call in e.get("tool_calls") or []]


def test_tool_calls_and_results_reach_the_prompt_intact_and_unescaped(llama_server: LlamaServer) -> None:
    conversation = [{"role": "system", "content": "Grade."}, *one_tool_round("C-ab12", TOOL_OUTPUT)]
    prompt = llama_server.post("/apply-template", {"messages": conversation, "tools": [DIFF_TOOL]})["prompt"]
    # The result byte for byte (not dropped, not HTML-escaped), in a user turn after the model's call: the
    # alternation Gemma's own template insists on, which a tool role would break.
    assert f"<start_of_turn>user\n<tool_response>\n{TOOL_OUTPUT}\n</tool_response><end_of_turn>" in prompt
    call = '<start_of_turn>model\n<tool_call>\n{"name": "diff", "arguments": {"candidate": "C-ab12"}}'
    assert call in prompt
    assert '"name": "diff"' in prompt.split("<end_of_turn>")[0]  # the schemas, in the first turn
    assert "&lt;" not in prompt and "&amp;" not in prompt


def test_the_server_parses_native_tool_calls_under_this_template(llama_server: LlamaServer) -> None:
    """llama.cpp derives the call format from the template (<tool_call> JSON) and parses the model's reply
    into `tool_calls`; under `required` its grammar holds the arguments to their schema. A base model calls
    a tool after two example rounds in the history (after one it may loop in text: `required` admits text
    before the call)."""
    conversation = [
        *one_tool_round("C-ab12", "-  a\n+  b"),
        *one_tool_round("C-cd34", "-  a\n+  b"),
        {"role": "user", "content": "Look at C-ab12."},
    ]
    body = {"messages": conversation, "tools": [DIFF_TOOL], "max_tokens": 48, "temperature": 0}
    reply = llama_server.post("/v1/chat/completions", {**body, "tool_choice": "required"})
    (call,) = reply["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "diff"
    assert json.loads(call["function"]["arguments"])["candidate"] in ("C-ab12", "C-cd34")  # the enum holds
    # llama.cpp reports its prefix-cache hits where the loop can record them.
    assert "cached_tokens" in reply["usage"]["prompt_tokens_details"]


def test_grading_the_bundled_example_parses_tool_calls_and_ends_within_budget(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    started = time.monotonic()
    result, events = grade(llama_server, tmp_path, turns=3, max_output_tokens=256)
    elapsed = time.monotonic() - started
    assert elapsed < 600 + 10
    calls = parsed_calls(events)
    assert calls, "the model made no tool call gagar could parse"
    tools = {"list_candidates", "diff", "read_file", "search", "submit_ranking"}
    assert all(c["name"] in tools for c in calls)
    # A 270M base model: a validated ranking or a clear failure, with the group passed through unchanged.
    if result.status != "graded":
        assert result.status == "failed" and ("ranking" in result.reason or "budget" in result.reason)
        forced = [e for e in events if e["type"] == "message" and e.get("forced")]
        assert forced, "the last turn was not forced to submit"
        assert result.advantages_after == result.advantages_before
    # Every turn after the first re-sends the conversation: llama.cpp serves it from its prefix cache.
    assert 0 < result.usage["cached_prompt_tokens"] < result.usage["prompt_tokens"]


def test_a_reply_cut_at_the_turn_limit_is_named_to_the_model(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    result, events = grade(llama_server, tmp_path, turns=2, max_output_tokens=6)
    assert result.status == "failed"
    assert [e["finish_reason"] for e in events if e["type"] == "response"][0] == "length"
    told = [e["content"] for e in events if e["type"] == "message" and e["role"] == "user"]
    assert any(text.startswith("Your reply was cut at the limit of 6 tokens") for text in told)


def test_a_context_overflow_fails_naming_the_limit(llama_server: LlamaServer, tmp_path: Path) -> None:
    with LlamaServer(llama_server.binary, llama_server.model, context=512, threads=THREADS) as small:
        result, events = grade(small, tmp_path, turns=2)
    assert result.status == "failed" and "context overflow" in result.reason
    assert "512 tokens" in result.reason and not any(e["type"] == "retry" for e in events)


def test_an_abandoned_request_stops_the_generation(llama_server: LlamaServer, tmp_path: Path) -> None:
    """The wall budget cuts a long reply; the loop streams, so closing the stream closes the connection and
    llama.cpp cancels the task and frees the slot. (A non-streamed request whose client left is generated on
    to max_tokens: measured here, over 9 minutes and 1,400 tokens before the server was stopped.)"""
    log = Path(llama_server.log_path or "")
    cancels = log.read_text(errors="replace").count("cancel task")
    # Unconstrained, the base model writes on to max_tokens (a JSON call would end by itself).
    budget = {"turns": 2, "max_output_tokens": 4000, "wall_seconds": 8}
    result, _ = grade(llama_server, tmp_path, structured=False, **budget)
    cut = time.monotonic()
    assert "wall-time budget exhausted" in result.reason
    while llama_server.busy() and time.monotonic() < cut + 5:
        time.sleep(0.1)
    assert not llama_server.busy(), "the server was still generating 5 s after the request was abandoned"
    assert log.read_text(errors="replace").count("cancel task") == cancels + 1


def test_a_server_restarting_mid_grading_is_retried(llama_server: LlamaServer, tmp_path: Path) -> None:
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["result"], outcome["events"] = grade(
            llama_server, tmp_path, turns=2, max_output_tokens=32, retries=8, retry_wait_max=4
        )

    worker = threading.Thread(target=run)
    worker.start()

    # A transcript is written to a hidden `.NAME.<random>.tmp` beside its place and put there when the grading
    # ends (grader.util.atomic): wait for the first response in that file, so the restart falls mid-grading.
    def written() -> str:
        return "".join(p.read_text() for p in tmp_path.glob(".inventory-average-empty.jsonl.*.tmp"))

    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and '"response"' not in written():
        time.sleep(0.2)
    assert worker.is_alive(), "the grading ended before the server could be restarted under it"
    llama_server.stop()  # by PID and process group, as a crash or a redeploy would
    llama_server.start()  # same port, empty cache
    worker.join(600)
    events = outcome["events"]
    # Recovered either by a counted retry or, when the restart only left a dead kept-alive connection behind,
    # by the endpoint's one free resend of a request that never reached a server.
    recoveries = [e for e in events if e["type"] in ("retry", "resent")]
    assert recoveries, [e["type"] for e in events]
    assert "Connection" in recoveries[0]["error"] or "503" in recoveries[0]["error"], recoveries[0]
    responses = [e["t"] for e in events if e["type"] == "response"]
    assert len(responses) >= 2 and responses[-1] > recoveries[0]["t"]  # the grading went on after the restart
    assert outcome["result"].status in ("graded", "failed")


def test_grading_the_bundled_example_with_default_options(llama_server: LlamaServer, tmp_path: Path) -> None:
    """`gagar grade --grader llm` as a user runs it, the model and the URL given: native tool calls, streamed
    replies, `tool_choice` auto then required, and a final turn of submit_ranking alone under a
    `response_format`; llama-server takes them all, so the endpoint learns nothing, and the grading ends in a
    validated ranking."""
    _, _, transcript = grade_with_defaults(llama_server.url, llama_server.alias, tmp_path / "run")
    assert not [e for e in transcript if e["type"] == "learnt"], "llama-server supports every default"


def test_a_conversation_outgrowing_the_context_ends_in_the_final_turn_on_what_fits(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    """Default options on a server whose context (2,200 tokens asked, 2,304 given) holds the opening (about
    2,070 tokens) and not much of a reply: Gemma 3 270M's first turn, echoing its prompt, runs into the end of
    the context, and llama-server refuses the second request for its size. The loop sends the final turn on
    the opening alone (the final turn offers one tool, so it is about 1,400 tokens with room for the call);
    the grading ends in the model's validated ranking, the transcript naming what was left out and the
    limit. (23 s on 2 idle cores.)"""
    with LlamaServer(llama_server.binary, llama_server.model, context=2200, threads=THREADS) as small:
        _, result, events = grade_with_defaults(small.url, small.alias, tmp_path / "run")
    assert result.details["final_turn"] == {"turn": 2, "why": "context window"}
    # Once at least: a final-turn reply cut by the end of the context is repaired on a shorter conversation.
    left_out = [e for e in events if e["type"] == "left_out"]
    assert left_out and all(e["slices"][0][0] == 2 for e in left_out)  # the system prompt and task are kept
    assert all(e["context_tokens"] >= 2200 and e["prompt_tokens"] > e["context_tokens"] for e in left_out)
    told = [e for e in events if e["type"] == "message" and e.get("why") == "context window"]
    assert told and "left out to fit the model's context" in told[-1]["content"]
