"""Retries of a request that failed for a passing reason, with tenacity, inside the call's deadline: the
wait is exponential with jitter; no retry starts past the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_any,
    wait_exponential_jitter,
)

from grader.graders.llm.budgets import Budgets
from grader.graders.llm.failures import Failure

Result = TypeVar("Result")


def retried(
    attempt: Callable[[], Result],
    budgets: Budgets,
    deadline: Callable[[], float],
    note_retry: Callable[[int, BaseException | None, float | None], Any],
) -> Result:
    """`attempt()`, retried while it raises a retryable `Failure`, as `budgets` allow (`retries`,
    `retry_wait_initial`, `retry_wait_max`) and before the deadline.

    Args:
        attempt: one attempt.
        budgets: the retry settings.
        deadline: the call's deadline now (`time.monotonic()`; it moves while the call waits for a slot).
        note_retry: called before each wait with the attempt's number, its failure and the wait.

    Returns:
        What an attempt returned.

    Raises:
        Failure: the last attempt's failure (not retryable, or the retries ran out).
    """

    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        note_retry(state.attempt_number, error, state.next_action.sleep if state.next_action else None)

    retrying = Retrying(
        retry=retry_if_exception(lambda e: isinstance(e, Failure) and e.retryable),
        stop=stop_any(stop_after_attempt(budgets.retries + 1), lambda _: time.monotonic() >= deadline()),
        wait=wait_exponential_jitter(multiplier=budgets.retry_wait_initial, max=budgets.retry_wait_max),
        before_sleep=before_sleep,
        reraise=True,
    )
    for trial in retrying:  # ends after the attempt that returned (tenacity reraises the last failure)
        with trial:
            result = attempt()
    return result
