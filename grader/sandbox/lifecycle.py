"""Closing open sandboxes when the process ends: normally, by an uncaught exception, by SIGINT or SIGTERM.

SIGKILL cannot be caught; what it leaves behind carries labels, and `cleanup_leftovers` removes it later.
Handlers are installed only from the main thread (Python allows no other); a sandbox opened from another
thread before any was opened from the main thread is still closed at exit, but not on a signal.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import weakref
from types import FrameType
from typing import Any, Protocol


class _Closable(Protocol):
    def close(self) -> None: ...


_open: weakref.WeakSet[Any] = weakref.WeakSet()
_lock = threading.Lock()
_installed = False
_previous: dict[int, Any] = {}


def track(sandbox: _Closable) -> None:
    """Close `sandbox` at exit or on SIGINT/SIGTERM unless it was closed before."""
    global _installed
    with _lock:
        _open.add(sandbox)
        if _installed:
            return
        atexit.register(close_all)
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGINT, signal.SIGTERM):
                _previous[signum] = signal.getsignal(signum)
                signal.signal(signum, _on_signal)
        _installed = True


def untrack(sandbox: _Closable) -> None:
    with _lock:
        _open.discard(sandbox)


def close_all() -> None:
    """Close every tracked sandbox; errors are swallowed so that the others still get closed."""
    with _lock:
        pending = list(_open)
    for sandbox in pending:
        # Best effort while the process is going down: one failure must not keep the others open.
        with contextlib.suppress(Exception):
            sandbox.close()


def _on_signal(signum: int, frame: FrameType | None) -> None:
    close_all()
    previous = _previous.get(signum)
    if callable(previous):
        # KeyboardInterrupt for SIGINT, or whatever the program had installed before us.
        previous(signum, frame)
        return
    if previous == signal.SIG_IGN:
        return
    # Default action: die by the same signal so that the parent sees the usual status.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
