"""The endpoint's bounds against servers that would push past them (real HTTP on loopback): a reply that never
ends is cut by the wall budget and by the request timeout, which bound the whole request; retry waits, the
server's `Retry-After` among them, end within the wall budget."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from grader.graders.llm.agent import Budgets, LLMGrader
from grader.graders.llm.endpoint import DeadlinePassed, Endpoint, EndpointFailed
from grader.groups.formats import load_group_file
from grader.pipeline import grade_group_sync
from grader.servers.scripted import Endless, Reply, ScriptedServer, error, text
from tests.conftest import EXAMPLE_GROUP
from tests.graders.test_endpoint import MESSAGES

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
