"""Retries of a request that failed for a passing reason, with tenacity, inside the call's deadline: the
wait is exponential with jitter, or what the server's `Retry-After` asks (at most `MAX_RETRY_AFTER`); no wait
starts past the deadline and none ends past it. A wait that would is not waited: the call fails at once,
naming the deadline and the wait (the agent loop names its wall budget).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential_jitter

from grader.graders.llm.budgets import Budgets
from grader.graders.llm.failures import DeadlinePassed, Failure, StatusFailure

MAX_RETRY_AFTER = 120.0
"""The longest `Retry-After` honoured, in seconds (a server asking for more is asked again after this)."""

Result = TypeVar("Result")


class _Plan:
    """The waits of one call's retries: computed once per attempt, so tenacity's stop (which runs before or
    after its wait, by version) and wait agree."""

    def __init__(self, budgets: Budgets, deadline: Callable[[], float]) -> None:
        self.budgets = budgets
        self.deadline = deadline
        self.backoff = wait_exponential_jitter(
            multiplier=budgets.retry_wait_initial, max=budgets.retry_wait_max
        )
        self.waits: dict[int, float] = {}
        self.late: str | None = None
        """Why the retries stopped short of their number: the wait would have ended past the deadline."""

    def wait(self, state: RetryCallState) -> float:
        if state.attempt_number not in self.waits:
            error = state.outcome.exception() if state.outcome else None
            asked = error.retry_after if isinstance(error, StatusFailure) else None
            if asked is not None:
                self.waits[state.attempt_number] = min(asked, MAX_RETRY_AFTER)
            else:
                self.waits[state.attempt_number] = self.backoff(state)
        return self.waits[state.attempt_number]

    def stop(self, state: RetryCallState) -> bool:
        if state.attempt_number > self.budgets.retries:
            return True
        wait, left = self.wait(state), self.deadline() - time.monotonic()
        if wait < left:
            return False
        error = state.outcome.exception() if state.outcome else None
        asked = " the server asked for" if isinstance(error, StatusFailure) and error.retry_after else ""
        self.late = (
            f"the deadline leaves {max(0.0, left):.1f}s, less than the {wait:.1f}s wait{asked} before retry "
            f"{state.attempt_number} (after: {error})"
        )
        return True


def retried(
    attempt: Callable[[], Result],
    budgets: Budgets,
    deadline: Callable[[], float],
    note_retry: Callable[[int, BaseException | None, float | None], Any],
) -> Result:
    """`attempt()`, retried while it raises a retryable `Failure`, as `budgets` allow (`retries`,
    `retry_wait_initial`, `retry_wait_max`) and the deadline leaves time for.

    Args:
        attempt: one attempt.
        budgets: the retry settings.
        deadline: the call's deadline now (`time.monotonic()`; it moves while the call waits for a slot).
        note_retry: called before each wait with the attempt's number, its failure and the wait.

    Returns:
        What an attempt returned.

    Raises:
        DeadlinePassed: a wait before the next retry would end past the deadline (the reason names both).
        Failure: the last attempt's failure (not retryable, or the retries ran out).
    """
    plan = _Plan(budgets, deadline)

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        note_retry(state.attempt_number, error, state.next_action.sleep if state.next_action else None)

    retrying = Retrying(
        retry=retry_if_exception(lambda e: isinstance(e, Failure) and e.retryable),
        stop=plan.stop,
        wait=plan.wait,
        before_sleep=before_sleep,
        reraise=True,
    )
    try:
        for trial in retrying:  # ends after the attempt that returned (tenacity reraises the last failure)
            with trial:
                result = attempt()
    except Failure:
        if plan.late is not None:
            raise DeadlinePassed(plan.late) from None
        raise
    return result
