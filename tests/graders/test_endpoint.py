"""The LLM grader's endpoint against scripted servers that behave as real ones do (real HTTP on loopback):
servers that do not stream, stream no choices, fail on a forced `tool_choice` or close kept-alive connections.
What the grader learns is learnt once per endpoint and recorded in the transcript and the result."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from grader.graders.llm.agent import Budgets, LLMGrader
from grader.graders.llm.endpoint import Endpoint, EndpointFailed, Traffic
from grader.graders.transcript import read_transcript
from grader.groups.formats import load_group_file
from grader.groups.models import GroupResult
from grader.inspect.steps import to_steps
from grader.pipeline import grade_group_sync
from grader.servers.scripted import NOT_STREAMING, Reply, ScriptedServer, error, labels_in, text
from tests.conftest import EXAMPLE_GROUP, run_gagar
from tests.support.llm_policies import FAST, MESSAGES, events_of, grade_twice, inspector, submit


def assert_learnt_once(results: list[GroupResult], option: str, cause: str) -> None:
    """The first grading learnt `option` (cause in the lesson), the second started knowing it."""
    (learnt,) = events_of(results[0], "learnt")
    assert learnt["option"] == option and cause in learnt["cause"], learnt
    assert events_of(results[1], "learnt") == []
    (known,) = events_of(results[1], "endpoint")
    assert known["learnt"] == [{k: learnt[k] for k in ("option", "refused", "instead", "cause")}]
    assert all(len(r.details["endpoint"]) == 1 and cause in r.details["endpoint"][0] for r in results)
    titles = [step.title for step in to_steps(read_transcript(results[1].transcript))]
    assert "endpoint: 1 thing(s) learnt before this grading" in titles  # as `gagar show` prints it


def test_a_server_that_refuses_to_stream_is_asked_for_whole_replies(tmp_path: Path) -> None:
    with ScriptedServer(inspector, streaming="refused") as server:
        results, requests = grade_twice(server, tmp_path)
    assert [r.status for r in results] == ["graded", "graded"], results[0].reason
    streamed = [bool(r.get("stream")) for r in requests[0]]
    assert streamed == [True] + [False] * (len(streamed) - 1)  # refused once, then never asked again
    assert requests[0][0]["messages"] == requests[0][1]["messages"]  # the same turn, asked whole
    assert not any(r.get("stream") for r in requests[1])
    assert all(r.usage["retries"] == 0 for r in results)  # a refusal is no outage
    assert results[0].usage["requests"] == 5 and results[1].usage["requests"] == 4
    assert_learnt_once(results, "stream", NOT_STREAMING)


def test_a_whole_reply_to_a_streamed_request_is_read_as_the_reply(tmp_path: Path) -> None:
    with ScriptedServer(inspector, streaming="whole") as server:
        results, requests = grade_twice(server, tmp_path)
    assert [r.status for r in results] == ["graded", "graded"], results[0].reason
    assert [bool(r.get("stream")) for r in requests[0]] == [True, False, False, False]  # no turn asked twice
    assert results[0].usage["prompt_tokens"] == 400 and results[0].usage["tool_calls"] == 8
    assert_learnt_once(results, "stream", "answered with a whole reply")


def test_a_stream_without_choices_is_asked_again_whole(tmp_path: Path) -> None:
    with ScriptedServer(inspector, streaming="no_choices") as server:
        results, requests = grade_twice(server, tmp_path)
    assert [r.status for r in results] == ["graded", "graded"], results[0].reason
    assert [bool(r.get("stream")) for r in requests[0]] == [True, False, False, False, False]
    assert requests[0][0]["messages"] == requests[0][1]["messages"]
    assert results[0].usage["retries"] == 0
    assert_learnt_once(results, "stream", "carried no choices")


def talks_until_forced(request: dict[str, Any], n: int) -> Reply:
    """Answers in words until told to submit, then submits (whatever the tool_choice)."""
    if request["messages"][-1]["content"].startswith("Call submit_ranking now"):
        return submit([labels_in(request)])
    return text("They all look fine to me.")


def test_a_server_error_on_a_forced_tool_choice_is_retried_once_with_auto(tmp_path: Path) -> None:
    """llama-cpp-python answers a tool_choice other than "auto" with HTTP 500 (an assertion): after the
    retries, once more with "auto", which works; from then on the forced turn sends "auto" at once."""
    with ScriptedServer(talks_until_forced, forced_tool_choice="crashes") as server:
        results, requests = grade_twice(server, tmp_path, stream=False)
    assert [r.status for r in results] == ["graded", "graded"], results[0].reason
    choices = [r["tool_choice"] for r in requests[0]]
    assert choices == ["auto", "auto"] + ["required"] * (FAST.retries + 1) + ["auto"]
    assert [r["tool_choice"] for r in requests[1]] == ["auto", "auto", "auto"]
    assert requests[0][-1]["messages"] == requests[0][2]["messages"]  # the forced turn, asked again
    (fallback,) = events_of(results[0], "fallback")
    assert fallback["without"] == "tool_choice" and fallback["after"] == "HTTP 500"
    assert_learnt_once(results, "tool_choice", "HTTP 500")
    assert results[0].details["endpoint"][0].startswith('tool_choice "required": "auto" sent instead')


def test_a_server_error_that_lasts_without_the_option_fails_the_grading(tmp_path: Path) -> None:
    def policy(request: dict[str, Any], n: int) -> Reply:
        if request["messages"][-1]["content"].startswith("Call submit_ranking now"):
            return error(500, "out of memory")
        return text("They all look fine to me.")

    with ScriptedServer(policy) as server:
        results, requests = grade_twice(server, tmp_path, stream=False)
    assert results[0].status == "failed"
    assert results[0].reason.endswith(
        "endpoint failed after 4 attempt(s), then once without tool_choice: HTTP 500: out of memory"
    )
    assert [r["tool_choice"] for r in requests[0]] == ["auto", "auto", "required", *["required"] * 3, "auto"]
    assert events_of(results[0], "learnt") == [] and "endpoint" not in results[0].details
    assert [r["tool_choice"] for r in requests[1]][2] == "required"  # nothing was learnt


def test_a_server_like_llama_cpp_python_grades_the_bundled_example_with_default_options(
    tmp_path: Path,
) -> None:
    """Streams without choices, and a 500 on a forced tool_choice: both learnt, the grading goes through."""
    with ScriptedServer(talks_until_forced, streaming="no_choices", forced_tool_choice="crashes") as server:
        (group,) = load_group_file(EXAMPLE_GROUP)
        budgets = Budgets(retry_wait_initial=0.01, retry_wait_max=0.05)
        grader = LLMGrader("scripted", base_url=server.url, transcript_dir=tmp_path, budgets=budgets)
        result = grade_group_sync(group, grader)
    assert result.status == "graded", result.reason
    learnt = [(e["option"], e["refused"]) for e in events_of(result, "learnt")]
    assert learnt == [("stream", "streamed replies"), ("tool_choice", 'tool_choice "required"')]
    assert len(result.details["endpoint"]) == 2
    titles = [step.title for step in to_steps(read_transcript(result.transcript))]
    assert "tried once without tool_choice after: HTTP 500" in titles
    lesson = 'learnt: tool_choice "required" refused; "auto" sent instead (that tool named where the request'
    assert any(title.startswith(lesson) for title in titles), titles


def test_a_refused_response_format_is_left_out(tmp_path: Path) -> None:
    def policy(request: dict[str, Any], n: int) -> Reply:
        if "response_format" in request:
            return error(400, "response_format is not supported by this model")
        ranking = {"ranking": [labels_in(request)], "reasons": {}, "confidence": 0.5}
        return text(json.dumps({"tool": "submit_ranking", "arguments": ranking}))

    with ScriptedServer(policy) as server:
        results, requests = grade_twice(server, tmp_path, tool_mode="text", structured=True)
    assert [r.status for r in results] == ["graded", "graded"], results[0].reason
    assert ["response_format" in r for r in requests[0]] == [True, False]
    assert not any("response_format" in r for r in requests[1])
    assert_learnt_once(results, "response_format", "not supported")


def test_a_request_lost_on_a_stale_kept_alive_connection_is_sent_again_at_once(tmp_path: Path) -> None:
    """The server closes a connection that carried a reply when the next request comes (a keep-alive timeout
    firing just then): the request never reached it, so it is sent again at once and costs no attempt."""
    (group,) = load_group_file(EXAMPLE_GROUP)
    with ScriptedServer(inspector, drop_kept_alive=True) as server:
        budgets = Budgets(retries=0, request_timeout=10)
        grader = LLMGrader(
            "scripted", base_url=server.url, transcript_dir=tmp_path, sandbox=None, budgets=budgets
        )
        result = grade_group_sync(group, grader)
    assert result.status == "graded", result.reason
    assert len(server.requests) == 4 and server.dropped == 3  # every turn after the first met a closed one
    assert result.usage["requests"] == 4 and result.usage["retries"] == 0
    resent = events_of(result, "resent")
    assert len(resent) == 3 and all("Connection closed before a reply" in e["error"] for e in resent)
    titles = [step.title for step in to_steps(read_transcript(result.transcript))]
    assert sum(title.startswith("sent again at once (a stale connection)") for title in titles) == 3
    assert events_of(result, "retry") == []  # at once: no backoff


def test_a_request_lost_twice_on_stale_connections_counts_as_an_attempt() -> None:
    """Sent again at once only once a call: a server dropping every request is an outage, retried as one."""

    both_in = threading.Barrier(2, timeout=30)

    def answers_the_first_two_together(request: dict[str, Any], n: int) -> Reply:
        if n < 2:
            both_in.wait()  # both in flight at once, so the client opens two connections
        return text("hi")

    with ScriptedServer(answers_the_first_two_together, drop_kept_alive=True) as server:
        budgets = Budgets(retries=1, retry_wait_initial=0.01, retry_wait_max=0.02)
        endpoint = Endpoint("scripted", server.url, "x", budgets=budgets)

        def ask(traffic: Traffic | None = None, note: Any = None) -> Any:
            deadline = time.monotonic() + 30
            return endpoint.complete(MESSAGES, max_tokens=8, deadline=deadline, traffic=traffic, note=note)

        with ThreadPoolExecutor(2) as pool:  # two requests at once: two connections, each kept alive after
            assert [r.content for r in pool.map(lambda _: ask(), range(2))] == ["hi", "hi"]
        traffic, events = Traffic(), []
        reply = ask(traffic, lambda kind, **fields: events.append(kind))
    assert reply.content == "hi" and server.dropped == 2 and server.connections == 3
    assert events == ["resent", "retry"] and traffic.retries == 1 and traffic.requests == 2


def test_the_sdk_conventions_name_the_server_and_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a base URL or a key, `OPENAI_BASE_URL` and `OPENAI_API_KEY` say them, as for any OpenAI
    client; without the key either, "EMPTY" is sent (servers that need none accept any)."""
    with ScriptedServer(lambda request, n: text("hi")) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-from-the-environment")
        reply = Endpoint("scripted").complete(MESSAGES, max_tokens=8, deadline=time.monotonic() + 30)
        monkeypatch.delenv("OPENAI_API_KEY")
        Endpoint("scripted", server.url).complete(MESSAGES, max_tokens=8, deadline=time.monotonic() + 30)
    assert reply.content == "hi"
    assert server.authorizations == ["Bearer sk-from-the-environment", "Bearer EMPTY"]


def test_the_sdk_is_imported_with_the_first_endpoint_not_with_the_cli() -> None:
    """Every `gagar` command imports the LLM grader; the SDK's import takes seconds (its types), so it waits
    for an endpoint to be made."""
    loaded = "print(sorted(m for m in ('openai', 'httpx2') if m in sys.modules))"
    script = f"import sys, grader.cli.commands, grader.graders.llm.agent\n{loaded}\n"
    script += f"grader.graders.llm.agent.LLMGrader('m')\n{loaded}"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.split("\n")[:2] == ["[]", "['httpx2', 'openai']"]


def test_a_server_that_is_down_is_retried_with_backoff_and_named() -> None:
    with ScriptedServer(lambda request, n: text("hi")) as gone:
        url = gone.url
    traffic, events = Traffic(), []
    endpoint = Endpoint("scripted", url, "x", budgets=Budgets(retries=1, retry_wait_initial=0.01))
    with pytest.raises(EndpointFailed, match=r"failed after 2 attempt\(s\): Connection failed"):
        endpoint.complete(
            MESSAGES,
            max_tokens=8,
            deadline=time.monotonic() + 30,
            traffic=traffic,
            note=lambda kind, **fields: events.append(kind),
        )
    assert events == ["retry"] and traffic.requests == 2 and traffic.retries == 1


def test_the_bundled_example_on_a_server_that_does_not_stream_with_default_options(tmp_path: Path) -> None:
    """`gagar grade` with the LLM grader's defaults (streaming on) against a server that refuses to stream,
    then `gagar show` says what was learnt."""
    with ScriptedServer(inspector, streaming="refused") as server:
        proc = run_gagar(
            "grade", str(EXAMPLE_GROUP), "--out", str(tmp_path), "--grader", "llm", "--model", "scripted",
            "--base-url", server.url, "--api-key-env", "NO_SUCH_VAR",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert [bool(r.get("stream")) for r in server.requests] == [True, False, False, False, False]
    result = json.loads((tmp_path / "results.jsonl").read_text())
    assert result["status"] == "graded", result["reason"]
    assert result["details"]["endpoint"] == [
        f"streamed replies: replies are requested whole (learnt from: HTTP 400: {NOT_STREAMING})"
    ]
    shown = run_gagar("show", str(tmp_path), result["group_id"])
    assert shown.returncode == 0, shown.stderr
    printed = " ".join(shown.stdout.split())  # rich wraps long lines at the width
    assert f"endpoint learnt: {result['details']['endpoint'][0]}" in printed
    assert "learnt: streamed replies refused; replies are requested whole" in printed  # the transcript's step
    summary = run_gagar("show", str(tmp_path))
    assert summary.returncode == 0, summary.stderr
    lesson = result["details"]["endpoint"][0]
    assert f"endpoint learnt (1 group(s)): {lesson}" in " ".join(summary.stdout.split())


def test_a_server_restarting_mid_grading_is_retried_until_it_is_back(tmp_path: Path) -> None:
    """The server dies mid-reply on the second turn and comes back on the same port 0.3 s later: the broken
    reply and the refused connections are retried with backoff, and the grading goes on against the new
    one."""
    (group,) = load_group_file(EXAMPLE_GROUP)
    later: dict[str, ScriptedServer] = {}

    def dies_on_the_second_turn(request: dict[str, Any], n: int) -> Reply:
        reply = inspector(request, n)
        if n != 1:
            return reply

        def restart() -> None:
            time.sleep(0.3)
            later["server"] = ScriptedServer(inspector, port=port).start()

        first.stop()  # no longer listening before this reply goes out (this handler runs on its own thread)
        threading.Thread(target=restart).start()
        return Reply(reply.body, cut_after=40)

    first = ScriptedServer(dies_on_the_second_turn).start()
    port = int(first.url.rsplit(":", 1)[1].split("/")[0])
    budgets = Budgets(retries=10, retry_wait_initial=0.05, retry_wait_max=0.2)
    grader = LLMGrader("scripted", base_url=first.url, transcript_dir=tmp_path, sandbox=None, budgets=budgets)
    try:
        result = grade_group_sync(group, grader)
    finally:
        if "server" in later:
            later["server"].stop()
    assert result.status == "graded", result.reason
    errors = [e["error"] for e in events_of(result, "retry")]
    assert errors[0].startswith("Connection broken mid-reply: the stream broke off")
    assert any(error.startswith("Connection failed") for error in errors[1:])  # refused while it was down
    assert len(later["server"].requests) == 3  # the second turn again, then the third and fourth


def _whole(message: dict[str, Any], usage: dict[str, Any] | None = None) -> Reply:
    body: dict[str, Any] = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    return Reply(body | ({"usage": usage} if usage is not None else {}))


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": None, "tool_calls": 5},
        {"role": "assistant", "content": [{"type": "text", "text": 5}]},
    ],
    ids=["tool_calls-not-a-list", "content-part-not-text"],
)
def test_a_malformed_reply_is_an_endpoint_failure_naming_it(message: dict[str, Any]) -> None:
    """A server's reply is data: a field of the wrong type fails the call as documented, not a TypeError."""
    with ScriptedServer(lambda request, n: _whole(message)) as server:
        endpoint = Endpoint("scripted", server.url, "x", stream=False, budgets=Budgets(retries=0))
        with pytest.raises(EndpointFailed, match="malformed"):
            endpoint.complete(MESSAGES, max_tokens=8, deadline=time.monotonic() + 30)


def test_usage_with_a_count_that_is_not_a_number_is_no_usage() -> None:
    """The grader adds the reported counts to its budget: a count that is not an integer is not reported."""
    reply = _whole({"role": "assistant", "content": "hi"}, {"prompt_tokens": 5, "completion_tokens": "7"})
    with ScriptedServer(lambda request, n: reply) as server:
        endpoint = Endpoint("scripted", server.url, "x", stream=False)
        got = endpoint.complete(MESSAGES, max_tokens=8, deadline=time.monotonic() + 30)
    assert got.content == "hi" and got.usage is None


def test_an_error_body_sent_with_status_200_is_the_error_it_names() -> None:
    """Some proxies answer errors with status 200: the body's `error.code` is the status, retried as one."""
    overloaded = Reply({"error": {"message": "model overloaded", "code": 503}})
    with ScriptedServer(lambda request, n: overloaded) as server:
        budgets = Budgets(retries=1, retry_wait_initial=0.01, retry_wait_max=0.02)
        endpoint = Endpoint("scripted", server.url, "x", stream=False, budgets=budgets)
        with pytest.raises(EndpointFailed, match=r"after 2 attempt\(s\): HTTP 503: model overloaded"):
            endpoint.complete(MESSAGES, max_tokens=8, deadline=time.monotonic() + 30)
    assert len(server.requests) == 2


def test_a_cached_token_count_that_is_not_finite_counts_as_none_reported() -> None:
    """`cached_tokens` is optional: a NaN (Python's JSON reader takes it) costs the count, not the reply."""
    usage = {
        "prompt_tokens": 5,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": float("nan")},
    }
    reply = _whole({"role": "assistant", "content": "hi"}, usage)
    with ScriptedServer(lambda request, n: reply) as server:
        endpoint = Endpoint("scripted", server.url, "x", stream=False)
        got = endpoint.complete(MESSAGES, max_tokens=8, deadline=time.monotonic() + 30)
    assert got.content == "hi" and got.usage is not None and got.cached_tokens == 0
