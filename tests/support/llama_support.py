"""Test support: one real llama.cpp server and one llama-cpp-python server for the whole session, each built
on first use (progress on the terminal) or reused from the gagar cache (grader.servers.llamacpp,
grader.servers.llamacpp_python)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grader.graders.transcript import read_transcript
from grader.groups.models import GroupResult
from grader.servers.llamacpp import BuildUnavailable, LlamaServer, ensure_binary, ensure_model
from grader.servers.llamacpp_python import LlamaCppPythonServer, ensure_package
from tests.conftest import EXAMPLE_GROUP, run_gagar
from tests.support.progress import build_progress

CONTEXT = 16384
"""Both servers' context: a grading with default options fits (llama-cpp-python refuses a request whose prompt
plus `max_tokens`, 1,024 by default, exceeds it)."""


THREADS = 1
"""Both servers' threads. One: beside other busy processes a second llama.cpp thread spins at every barrier of
a token while its partner waits for a core. Gemma 3 270M, 256 tokens beside two `while 1: pass` loops on 2
cores: 51 tokens/s on one thread, 13-23 on two (idle: 54 and 77); `--poll 0` does not help (13-22)."""


DIFF_TOOL = {
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
"""A one-argument tool both real servers are asked to call (its argument an enum of candidate labels)."""


@pytest.fixture(scope="session")
def llama_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    """A running llama-server on 127.0.0.1, stopped by PID and process group when the session ends.

    Built on first use with progress on the terminal. Skips (with the reason) where it cannot be built or
    started; never passes silently."""
    try:
        what = "llama-server (llama.cpp, from the llama-cpp-python sdist)"
        with build_progress(request.config, what, "about 4.5 min on 2 cores"):
            binary, model = ensure_binary(), ensure_model()
        log = tmp_path_factory.mktemp("llama") / "server.log"
        server = LlamaServer(binary, model, context=CONTEXT, threads=THREADS, log_path=log)
        server.start()
    except BuildUnavailable as exc:
        pytest.skip(f"real llama.cpp server unavailable: {exc}")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def llama_cpp_python_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaCppPythonServer]:
    """A running `python -m llama_cpp.server --chat_format chatml-function-calling` on 127.0.0.1, stopped by
    PID and process group when the session ends. Skips (with the reason) where it cannot be built or
    started."""
    try:
        what = "llama-cpp-python's server (a wheel compiled from its sdist)"
        with build_progress(request.config, what, "about 4 min on 2 idle cores"):
            site = ensure_package()
        log = tmp_path_factory.mktemp("llama-cpp-python") / "server.log"
        server = LlamaCppPythonServer(site, ensure_model(), context=CONTEXT, threads=THREADS, log_path=log)
        server.start()
    except BuildUnavailable as exc:
        pytest.skip(f"real llama-cpp-python server unavailable: {exc}")
    try:
        yield server
    finally:
        server.stop()


def grade_with_defaults(
    base_url: str, model: str, out: Path
) -> tuple[str, GroupResult, list[dict[str, Any]]]:
    """`gagar grade` of the bundled example with the LLM grader's default options against a real server, as a
    user runs it; returns what it printed, the group's result and its transcript's events. Asserts a validated
    ranking: the model's own (the base model calls no tool on its own; the loop's final turn makes it submit),
    covering every trajectory."""
    proc = run_gagar(
        "grade",
        str(EXAMPLE_GROUP),
        "--out",
        str(out),
        "--grader",
        "llm",
        "--model",
        model,
        "--base-url",
        base_url,
        timeout=1200,
    )
    (line,) = (out / "results.jsonl").read_text().splitlines()
    result = GroupResult.model_validate_json(line)
    assert result.transcript, result.reason
    assert result.group_id in proc.stdout
    assert proc.returncode == 0 and result.status == "graded", (result.reason, proc.stderr[-2000:])
    assert sorted(t for tier in result.ranking for t in tier) == sorted(result.weights)
    events = read_transcript(Path(result.transcript))
    (submitted,) = [e for e in events if e["type"] == "submitted"]
    assert submitted["final"] == result.details.get("final_turn", {}).get("why")  # recorded either way
    return proc.stdout, result, events
