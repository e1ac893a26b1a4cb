"""llama-cpp-python's own server, `python -m llama_cpp.server --chat_format chatml-function-calling`, as a
second real server (built or reused by grader.servers.llamacpp_python; else skipped, with why), serving Gemma
3 270M.

What it does on the wire, which the LLM grader's transport has to live with, is asserted here against the
real server, so an imitation of it elsewhere cannot drift from it unseen."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from grader.servers.llamacpp_python import LlamaCppPythonServer
from tests.support.llama_support import DIFF_TOOL as TOOL
from tests.support.llama_support import grade_with_defaults

ASK = [{"role": "user", "content": "Look at C-ab12."}]


def post(server: LlamaCppPythonServer, body: dict[str, Any]) -> tuple[int, str, bytes]:
    """POST a chat completion at temperature 0, as the grader sends them (the server's own default samples,
    so a call's arguments could differ run to run); the status, the content type and the raw body (error
    statuses too)."""
    request = urllib.request.Request(
        f"{server.url}/chat/completions",
        data=json.dumps(
            {"model": server.alias, "messages": ASK, "max_tokens": 16, "temperature": 0, **body}
        ).encode(),
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
    """`gagar grade --grader llm` as a user runs it: what the endpoint learns of this server (whole replies
    after an empty stream; for "required", "auto", or the one tool offered named; no json_schema
    `response_format`) it records, and the grading ends in a validated ranking."""
    _, result, transcript = grade_with_defaults(
        llama_cpp_python_server.url, llama_cpp_python_server.alias, tmp_path / "run"
    )
    learnt = {e["option"] for e in transcript if e["type"] == "learnt"}
    assert learnt <= {"stream", "tool_choice", "response_format"}, learnt


def test_a_forced_tool_choice_streamed_gets_an_empty_stream_then_a_closed_connection(
    llama_cpp_python_server: LlamaCppPythonServer,
) -> None:
    """`chatml-function-calling` streams no tool call it chose or was made to choose: the handler raises after
    the 200 went out, the stream ends without one event, and the server closes the connection, so a client's
    next request on it never reaches the server (the endpoint asks again whole, then resends at once)."""
    connection = http.client.HTTPConnection("127.0.0.1", llama_cpp_python_server.port, timeout=240)
    body = {"model": llama_cpp_python_server.alias, "messages": ASK, "max_tokens": 16, "tools": [TOOL]}
    headers = {"Content-Type": "application/json"}
    connection.request(
        "POST",
        "/v1/chat/completions",
        json.dumps({**body, "tool_choice": "required", "stream": True}),
        headers,
    )
    reply = connection.getresponse()
    assert (reply.status, reply.getheader("Content-Type", "").split(";")[0]) == (200, "text/event-stream")
    assert events(reply.read()) == []
    time.sleep(0.5)  # the close has long arrived: this is no race
    with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
        connection.request("POST", "/v1/chat/completions", json.dumps(body), headers)
        connection.getresponse()
    connection.close()


def test_a_forced_tool_choice_unstreamed_is_a_500_that_names_nothing(
    llama_cpp_python_server: LlamaCppPythonServer,
) -> None:
    """ "required" trips an assertion in the handler: an HTTP 500 with an empty message, so no rule can read
    the option it refuses from the answer; a named function, or "auto", gets a parsed tool call."""
    status, _, body = post(llama_cpp_python_server, {"tools": [TOOL], "tool_choice": "required"})
    assert status == 500
    assert json.loads(body)["error"]["message"] == ""
    named = {"type": "function", "function": {"name": "diff"}}
    # Room for the whole call: arguments cut at the token limit would not be JSON.
    status, _, body = post(llama_cpp_python_server, {"tools": [TOOL], "tool_choice": named, "max_tokens": 64})
    assert status == 200
    (call,) = json.loads(body)["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "diff"
    assert json.loads(call["function"]["arguments"])["candidate"] in ("C-ab12", "C-cd34")


def test_streamed_replies_carry_no_usage_and_response_format_json_schema_is_a_500(
    llama_cpp_python_server: LlamaCppPythonServer,
) -> None:
    status, kind, body = post(
        llama_cpp_python_server, {"stream": True, "stream_options": {"include_usage": True}}
    )
    chunks = [json.loads(data) for data in events(body) if data != "[DONE]"]
    assert status == 200 and kind.startswith("text/event-stream") and chunks
    assert all(chunk["choices"] and "usage" not in chunk for chunk in chunks)  # the loop estimates usage
    schema = {"name": "x", "schema": {"type": "object"}}
    status, _, body = post(
        llama_cpp_python_server, {"response_format": {"type": "json_schema", "json_schema": schema}}
    )
    assert (
        status == 500
    )  # a validation error, sent as a server error: "Input should be 'text' or 'json_object'"
    assert "response_format" in json.loads(body)["error"]["message"]
