"""The threads batch grading runs on: at most `size` gradings at once, and a grading given up on frees its
slot at once, whatever its grader does.

`BatchGrader` (`grader.integrations.batch`) queues each grading here and abandons it when it is late at
collection or over its budget.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass

from grader.errors import GagarError
from grader.groups.models import GroupResult

__all__ = ["BatchClosed", "Job", "Workers"]


class BatchClosed(GagarError, RuntimeError):
    """``submit()`` on a batch grader already closed; nothing of the call was kept pending."""


@dataclass(eq=False)
class Job:
    """One grading queued on the workers, with the future its result goes to."""

    future: Future[GroupResult]
    run: Callable[[Future[GroupResult]], GroupResult]
    """The grading; it gets its own future (to arm a budget when it starts)."""


class Workers:
    """Runs up to `size` gradings at once, each on its own daemon thread.

    A thread pool would keep a hung grading's thread, and with it one of its slots, until the grader
    returns, and would make the interpreter wait for it at exit. Here a grading that is given up on
    (`abandon`: late, or over its budget) frees its slot at once; its thread runs on to the grader's end as
    a daemon and its result is dropped.
    """

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self._lock = threading.Lock()
        self._queue: deque[Job] = deque()
        self._running: set[Future[GroupResult]] = set()
        self.closed = False

    def submit(self, run: Callable[[Future[GroupResult]], GroupResult]) -> Future[GroupResult]:
        """Queue a grading; it starts when a slot is free.

        Raises:
            BatchClosed: `close` was called.
        """
        job = Job(Future(), run)
        with self._lock:
            if self.closed:
                raise BatchClosed("the batch grader is closed: submit() after close()")
            self._queue.append(job)
        self._pump()
        return job.future

    def _pump(self) -> None:
        started = []
        with self._lock:
            while self._queue and len(self._running) < self.size:
                job = self._queue.popleft()
                if job.future.set_running_or_notify_cancel():  # False: cancelled while queued
                    self._running.add(job.future)
                    started.append(job)
        for job in started:
            threading.Thread(target=self._work, args=(job,), name="gagar-batch", daemon=True).start()

    def _work(self, job: Job) -> None:
        try:
            result = job.run(job.future)
        except BaseException as exc:  # noqa: BLE001 - the job catches everything; this is the last line
            with contextlib.suppress(InvalidStateError):
                job.future.set_exception(exc)
        else:
            with contextlib.suppress(InvalidStateError):  # cut off at its budget: a result is already set
                job.future.set_result(result)
        finally:
            self.abandon(job.future)

    def abandon(self, future: Future[GroupResult]) -> None:
        """Give up on a grading: a queued one never starts, a running one frees its slot now."""
        if future.cancel():
            return
        with self._lock:
            self._running.discard(future)
        self._pump()

    def running(self) -> list[Future[GroupResult]]:
        """The gradings running now."""
        with self._lock:
            return list(self._running)

    def close(self) -> list[Future[GroupResult]]:
        """Refuse new gradings and cancel the queued ones; returns the running ones."""
        with self._lock:
            self.closed = True
            queued, self._queue = list(self._queue), deque()
        for job in queued:
            job.future.cancel()
        return self.running()
