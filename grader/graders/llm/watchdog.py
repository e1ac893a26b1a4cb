"""What bounds a request as a whole, not the gap between its bytes: a watchdog that cuts the request's
connection at its deadline, so a reply that never ends (a stream of keep-alive comments or blank lines, a
body trickled byte by byte) ends there, and the server sees its client gone and stops generating.

An HTTP library's timeouts bound each read, and each keep-alive byte starts a new one. Closing a socket from
another thread does not wake a thread blocked reading it (Linux); shutting it down does, and sends the server
a FIN. The watchdog reaches the socket through the `openai` SDK's HTTP client: the endpoint gives the SDK an
httpx2 client whose transport (`GuardedTransport`) hands each response's socket to the `Guard` of the
request in flight on that thread. Until the response's headers come, the request's read timeout (set to the
time left) bounds it.

The same transport keeps a connection alive after a stream: the SDK stops reading at "[DONE]" and closes the
response, which would close its connection with the body's last bytes unread (a new connection for every
turn); the guarded stream reads them first, for at most `DRAIN_SECONDS`.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx2

DRAIN_SECONDS = 0.25
"""How long a stream's unread end is read for before its connection is closed instead of kept alive."""


class _Alarms:
    """One daemon thread that calls functions at given `time.monotonic()` times, for every endpoint (a timer
    thread per request would cost a thread start on every turn)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def at(self, when: float, call: Callable[[], None]) -> None:
        """Calls `call()` on the alarm thread at `when` (a call that may come after it is no longer wanted
        must check that itself)."""
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._order), call))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="gagar-endpoint-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                _, _, call = heapq.heappop(self._heap)
            with contextlib.suppress(Exception):  # a failed cut leaves the request to its read timeout
                call()


_ALARMS = _Alarms()
_current = threading.local()


class Guard:
    """The watchdog of one request: cuts its connection at `cut_at` (a `time.monotonic()` time) unless the
    request was released first. Used as a context manager around the request, on the thread that sends it.

    Attributes:
        cut: why the connection was cut (`reason`, or "drain" when a stream's end was read too long), None
            while it was not.
        replied: whether the response's headers came (a failure before them never reached a reply).
    """

    def __init__(self, cut_at: float, reason: str) -> None:
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._released = False
        self.cut: str | None = None
        self.replied = False
        self.abandoned = False
        """Set by the reader that stops before the stream's end: its connection is closed, not drained."""
        _ALARMS.at(cut_at, lambda: self._fire(reason))

    def __enter__(self) -> Guard:
        _current.guard = self
        return self

    def __exit__(self, *exc: object) -> None:
        _current.guard = None
        self.release()

    def attach(self, sock: socket.socket | None) -> None:
        """The response's headers came on `sock` (None where the transport gives none)."""
        with self._lock:
            self.replied = True
            if self._released:
                return
            self._socket = sock
            if self.cut is not None:  # the deadline passed while the headers were on their way
                _shut(sock)

    def _fire(self, reason: str) -> None:
        with self._lock:
            if self._released or self.cut is not None:
                return
            self.cut = reason
            _shut(self._socket)

    def drain_for(self, seconds: float) -> None:
        """Cuts the connection in `seconds` unless released first (reading a stream's end)."""
        _ALARMS.at(time.monotonic() + seconds, lambda: self._fire("drain"))

    def release(self) -> None:
        """The request is over: no cut from now on (its connection may already serve another request)."""
        with self._lock:
            self._released = True
            self._socket = None


def _shut(sock: socket.socket | None) -> None:
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class _GuardedStream(httpx2.SyncByteStream):
    """A response body under its request's guard: released when the body ends or is closed; an unread end
    (a stream the SDK stopped reading at "[DONE]") read first, briefly, so the connection is kept alive."""

    def __init__(self, inner: Any, guard: Guard) -> None:
        self._inner = inner
        self._guard = guard
        self._chunks: Iterator[bytes] | None = None
        self._ended = False

    def __iter__(self) -> Iterator[bytes]:
        self._chunks = iter(self._inner)
        # Not `yield from`: it would close the body's iterator with this one, and `close` reads on with it.
        for chunk in self._chunks:  # noqa: UP028
            yield chunk
        self._ended = True

    def close(self) -> None:
        guard = self._guard
        try:
            if not self._ended and self._chunks is not None and guard.cut is None and not guard.abandoned:
                guard.drain_for(DRAIN_SECONDS)
                with contextlib.suppress(httpx2.HTTPError, OSError):
                    for _ in self._chunks:
                        if guard.cut is not None:
                            break
        finally:
            guard.release()  # before the connection can go back to the pool and serve another request
            self._inner.close()


class GuardedTransport(httpx2.BaseTransport):
    """An httpx2 transport that puts each response sent from a thread with a `Guard` open under that guard.

    Args:
        inner: the transport that does the HTTP.
    """

    def __init__(self, inner: httpx2.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        guard: Guard | None = getattr(_current, "guard", None)
        response = self._inner.handle_request(request)
        if guard is None:
            return response
        network = response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        guard.attach(sock if isinstance(sock, socket.socket) else None)
        return httpx2.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_GuardedStream(response.stream, guard),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()
