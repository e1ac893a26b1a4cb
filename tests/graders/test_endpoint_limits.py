"""The endpoint's bounds against servers that would push past them (real HTTP on loopback): a reply that never
ends is cut by the wall budget and by the request timeout, which bound the whole request; retry waits, the
server's `Retry-After` among them, end within the wall budget; a context limit a server states is learnt
only where plausible, forgotten once the server answers above it, and named in the outcome of a grading it
cut short."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from grader.graders.llm.agent import Budgets, LLMGrader
from grader.graders.llm.endpoint import ContextOverflow, DeadlinePassed, Endpoint, EndpointFailed
from grader.graders.transcript import read_transcript
from grader.groups.formats import load_group_file
from grader.inspect.steps import to_steps
from grader.pipeline import grade_group_sync
from grader.servers.scripted import Endless, Reply, ScriptedServer, assistant_turns, error, labels_in, text
from tests.conftest import EXAMPLE_GROUP
from tests.support.llm_policies import MESSAGES, events_of, grade_twice, inspector, submit

SLACK = 2.0
"""Seconds a bounded call may end after its bound: the watchdog's cut, the server noticing, a loaded
machine's scheduling (2 cores shared by many test runs)."""

ENDLESS = {
    "comments": (Endless(": keep-alive\n\n"), True),
    "blank lines": (Endless("\n"), True),
    "one chunk, then comments": (Endless(": ping\n\n", first=1), True),
    "a whole reply's whitespace": (Endless(" "), False),
}


def ends_never(kind: str) -> Any:
    endless, _ = ENDLESS[kind]

    def policy(request: dict[str, Any], n: int) -> Reply:
        return Reply(text("never seen").body, endless=endless)

    return policy


@pytest.mark.parametrize("kind", list(ENDLESS))
def test_a_reply_that_never_ends_is_cut_by_the_wall_budget(kind: str, tmp_path: Path) -> None:
    """Keep-alive bytes reset a read timeout, not the wall budget: the grading ends at its budget, naming it,
    and the server sees its client gone (so it would stop generating)."""
    (group,) = load_group_file(EXAMPLE_GROUP)
    _, stream = ENDLESS[kind]
    with ScriptedServer(ends_never(kind)) as server:
        budgets = Budgets(wall_seconds=3, retries=0)
        grader = LLMGrader(
            "scripted",
            base_url=server.url,
            transcript_dir=tmp_path,
            sandbox=None,
            stream=stream,
            budgets=budgets,
        )
        began = time.monotonic()
        result = grade_group_sync(group, grader)
        ended = time.monotonic()
        while not server.abandoned and time.monotonic() < ended + SLACK:
            time.sleep(0.05)
    assert result.status == "failed" and result.reason.endswith(": wall-time budget exhausted (3s)"), (
        result.reason
    )
    assert ended - began < 3 + SLACK, ended - began
    assert server.abandoned and server.abandoned[0] < ended + SLACK  # the connection was closed


@pytest.mark.parametrize("kind", list(ENDLESS))
def test_a_reply_that_never_ends_is_cut_by_the_request_timeout(kind: str) -> None:
    """The request timeout bounds the whole request too (a timeout, retried as one: here no retry is left)."""
    _, stream = ENDLESS[kind]
    with ScriptedServer(ends_never(kind)) as server:
        budgets = Budgets(request_timeout=2, retries=0)
        endpoint = Endpoint("scripted", server.url, "x", stream=stream, budgets=budgets)
        began = time.monotonic()
        with pytest.raises(
            EndpointFailed, match=r"failed after 1 attempt\(s\): timed out after 2s"
        ) as failed:
            endpoint.complete(MESSAGES, max_tokens=8, deadline=time.monotonic() + 60)
        took = time.monotonic() - began
    assert not isinstance(failed.value, DeadlinePassed)
    assert took < 2 + SLACK, took


def test_a_stream_cut_by_the_watchdog_leaves_the_next_request_a_working_connection() -> None:
    """The cut connection is not kept alive: the next request of the same endpoint gets its reply."""
    answers = [Reply(text("never seen").body, endless=Endless()), text("hello")]
    with ScriptedServer(lambda request, n: answers[min(n, 1)]) as server:
        endpoint = Endpoint("scripted", server.url, "x", budgets=Budgets(retries=0))
        with pytest.raises(DeadlinePassed):
            endpoint.complete(MESSAGES, max_tokens=8, deadline=time.monotonic() + 1)
        reply = endpoint.complete(MESSAGES, max_tokens=8, deadline=time.monotonic() + 30)
    assert reply.content == "hello" and server.connections == 2


def busy(status: int, retry_after: str | None, then: Reply | None = None, times: int = 10**6) -> Any:
    """A server answering `status` (with `Retry-After`, if given) to its first `times` requests, then
    `then`."""

    def policy(request: dict[str, Any], n: int) -> Reply:
        if n >= times and then is not None:
            return then
        reply = error(status, "model overloaded")
        if retry_after is not None:
            reply.headers["Retry-After"] = retry_after
        return reply

    return policy


@pytest.mark.parametrize("status", [503, 429])
def test_a_retry_after_past_the_wall_budget_fails_at_once_naming_the_budget(status: int) -> None:
    """The server asks for 30 s; 3 s are left: no wait starts that would end past the budget."""
    (group,) = load_group_file(EXAMPLE_GROUP)
    with ScriptedServer(busy(status, "30")) as server:
        budgets = Budgets(wall_seconds=3, retries=4)
        grader = LLMGrader("scripted", base_url=server.url, sandbox=None, budgets=budgets)
        began = time.monotonic()
        result = grade_group_sync(group, grader)
        took = time.monotonic() - began
    assert result.status == "failed" and result.reason.endswith(": wall-time budget exhausted (3s)"), (
        result.reason
    )
    assert took < SLACK and len(server.requests) == 1, took


def test_retry_waits_end_within_the_wall_budget() -> None:
    """Backoff of 2-3 s, then 4-5 s against a 4 s budget: the second wait would end past it, so it is not
    waited (it was: a 6 s budget ended after 9.6 s)."""
    with ScriptedServer(busy(503, None)) as server:
        budgets = Budgets(retries=10, retry_wait_initial=2, retry_wait_max=20)
        endpoint = Endpoint("scripted", server.url, "x", budgets=budgets)
        events: list[tuple[str, dict[str, Any]]] = []
        began = time.monotonic()
        with pytest.raises(
            DeadlinePassed, match=r"wait before retry 2 \(after: HTTP 503: model overloaded\)"
        ):
            endpoint.complete(
                MESSAGES,
                max_tokens=8,
                deadline=began + 4,
                note=lambda kind, **fields: events.append((kind, fields)),
            )
        took = time.monotonic() - began
    assert took < 4, took
    assert len(server.requests) == 2 and [kind for kind, _ in events] == ["retry"]


def test_a_retry_after_that_fits_is_waited() -> None:
    """`Retry-After: 1` is honoured (the retry waits it, not the 0.01 s backoff), then the reply comes."""
    with ScriptedServer(busy(429, "1", then=text("hi"), times=1)) as server:
        budgets = Budgets(retries=2, retry_wait_initial=0.01, retry_wait_max=0.02)
        endpoint = Endpoint("scripted", server.url, "x", budgets=budgets)
        events: list[dict[str, Any]] = []
        began = time.monotonic()
        reply = endpoint.complete(
            MESSAGES, max_tokens=8, deadline=began + 30, note=lambda kind, **fields: events.append(fields)
        )
        took = time.monotonic() - began
    assert reply.content == "hi" and 1 <= took < 1 + SLACK
    assert [e["sleep"] for e in events] == [1.0]


# -- the model's context -------------------------------------------------------------------------------------


def overflow(n_ctx: int, prompt: int) -> Reply:
    """llama.cpp's refusal of a request for not fitting its context."""
    message = f"request ({prompt} tokens) exceeds the available context size ({n_ctx} tokens)"
    body = {"code": 400, "message": message, "type": "exceed_context_size_error"}
    return Reply({"error": body | {"n_prompt_tokens": prompt, "n_ctx": n_ctx}}, status=400)


def refused_once(refusal: Reply, prompts: tuple[int, int] = (100, 100)) -> Any:
    """The inspector, whose second request gets `refusal` and whose final turn submits at once; its replies
    report `prompts[0]` prompt tokens on a grading's first turn, `prompts[1]` on later ones."""

    def policy(request: dict[str, Any], n: int) -> Reply:
        if n == 1:
            return refusal
        if "this is your last turn" in request["messages"][-1]["content"]:
            return submit([labels_in(request)])
        reply = inspector(request, n)
        prompt = prompts[min(assistant_turns(request), 1)]
        reply.body["usage"] = {"prompt_tokens": prompt, "completion_tokens": 20}
        return reply

    return policy


def test_one_lying_context_limit_does_not_blind_later_gradings(tmp_path: Path) -> None:
    """A 400 saying `n_ctx: 1` cuts the grading it answered short (and says so), and nothing else: later
    gradings run their course."""
    with ScriptedServer(refused_once(overflow(1, 1200))) as server:
        results, requests = grade_twice(server, tmp_path)
    assert [r.status for r in results] == ["graded", "graded"], results[0].reason
    assert results[0].details["final_turn"] == {"turn": 2, "why": "context window"}
    (left_out,) = events_of(results[0], "left_out")
    assert left_out["context_tokens"] is None
    assert "its limit of 1 tokens is not believed: below the least context" in left_out["reason"]
    assert "final_turn" not in results[1].details and len(requests[1]) == 4  # the inspector's four turns
    assert events_of(results[0], "learnt") == [] and "endpoint" not in results[1].details


def test_a_context_limit_below_what_the_endpoint_already_held_is_not_believed() -> None:
    answers = [text("hi", usage=(3000, 20)), overflow(2048, 2500)]
    with ScriptedServer(lambda request, n: answers[min(n, 1)]) as server:
        endpoint = Endpoint("scripted", server.url, "x", budgets=Budgets(retries=0))
        endpoint.complete(MESSAGES, max_tokens=8, deadline=time.monotonic() + 30)
        with pytest.raises(
            ContextOverflow, match="below the 3,020 tokens a request on this endpoint"
        ) as refused:
            endpoint.complete(MESSAGES, max_tokens=8, deadline=time.monotonic() + 30)
    assert refused.value.limit is None and endpoint.context_tokens is None and endpoint.lessons == []


def test_a_learnt_context_limit_is_named_in_the_gradings_it_cuts_short_and_forgotten_when_refuted(
    tmp_path: Path,
) -> None:
    """Learnt from a plausible refusal (4,096 tokens): a later grading whose conversation nears it takes its
    final turn early and says why (details, transcript, as `gagar show` prints them); a reply to a request of
    5,000 tokens then refutes it, and the endpoint forgets it."""
    (group,) = load_group_file(EXAMPLE_GROUP)
    with ScriptedServer(refused_once(overflow(4096, 5000), prompts=(1000, 2500))) as server:
        budgets = Budgets(retries=0, max_output_tokens=512)
        grader = LLMGrader("scripted", base_url=server.url, sandbox=None, seed=7, budgets=budgets)
        results = []
        for n in range(2):
            grader.config.transcript_dir = tmp_path / f"grading{n}"
            results.append(grade_group_sync(group, grader))
        assert grader.endpoint.context_tokens == 4096
        assert [r.status for r in results] == ["graded", "graded"], results
        (learnt,) = events_of(results[0], "learnt")
        assert learnt["option"] == "context" and "4,096 tokens" in learnt["cause"]
        # The second grading held 1,020 then 2,520 tokens: two more turns like the last and a reply would not
        # fit, so the third turn is the final one, and the outcome says what limit called for it.
        assert results[1].details["final_turn"] == {"turn": 3, "why": "context window"}
        lesson = "conversations over 4,096 tokens: the final turn comes while the conversation still fits"
        assert results[1].details["endpoint"][0].startswith(lesson + " (learnt from: context overflow")
        titles = [step.title for step in to_steps(read_transcript(results[1].transcript))]
        assert "endpoint: 1 thing(s) learnt before this grading" in titles  # as `gagar show` prints it

        refuting = text("ok", usage=(5000, 20))
        server.policy = lambda request, n: refuting
        endpoint = grader.endpoint
        events: list[dict[str, Any]] = []
        endpoint.complete(
            MESSAGES, max_tokens=8, deadline=time.monotonic() + 30, note=lambda kind, **f: events.append(f)
        )
    assert endpoint.context_tokens is None and endpoint.lessons == []
    assert events == [
        {
            "option": "context",
            "refused": "a context of 4,096 tokens",
            "instead": "forgotten: the limit is unknown again",
            "cause": "a reply to a request of 5,020 tokens",
        }
    ]


@pytest.mark.parametrize(
    ("timings", "expected"),
    [
        ({"prompt_n": 8000, "prompt_ms": 4000.0}, 0.0005),
        ({"prompt_n": 100, "prompt_ms": 4000.0}, None),  # too few tokens to time
        ({"prompt_n": 8000, "prompt_ms": float("nan")}, None),
        ({"prompt_n": 8000, "prompt_ms": -1}, None),
        ({"prompt_n": float("inf"), "prompt_ms": 1}, None),
        ({"prompt_n": True, "prompt_ms": 1}, None),
        ({"prompt_n": "8000", "prompt_ms": "4000"}, None),
        ({}, None),
        (None, None),
        ("timings", None),
    ],
)
def test_prompt_speed_is_read_from_plausible_timings_only(timings: object, expected: float | None) -> None:
    from grader.graders.llm.completions import prompt_token_seconds_of

    assert prompt_token_seconds_of(timings) == expected
