"""Progress of slow first-use builds (sandbox images, llama-server) on the terminal, through pytest's capture.

A fixture that builds for minutes would otherwise look like a hung test: pytest captures what it prints.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

QUIET_SECONDS = 2.0
"""A build that finishes within this is a cache hit: nothing is printed."""
HEARTBEAT_SECONDS = 30.0
"""How often a long build says it is still going."""


class _Terminal:
    """Writes whole lines where the user sees them: pytest's terminal reporter, else the real stderr."""

    def __init__(self, config: pytest.Config) -> None:
        self._reporter = config.pluginmanager.get_plugin("terminalreporter")
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        with self._lock:
            if self._reporter is not None:
                self._reporter.write_line(text)
                self._reporter.flush()
            else:
                print(text, file=sys.__stderr__, flush=True)


class _ToTerminal(logging.Handler):
    def __init__(self, terminal: _Terminal, prefix: str) -> None:
        super().__init__(logging.INFO)
        self._terminal, self._prefix = terminal, prefix

    def emit(self, record: logging.LogRecord) -> None:
        self._terminal.line(f"{self._prefix}{record.getMessage()}")


@contextmanager
def build_progress(config: pytest.Config, what: str, expected: str, logger: str = "grader") -> Iterator[None]:
    """Show a build's progress on the terminal while the block runs, even though pytest captures output.

    Nothing is printed when the block is over within `QUIET_SECONDS` (the build was cached). Otherwise a
    line says what is being built and how long that usually takes, every `HEARTBEAT_SECONDS` a line says it
    is still going, `logger`'s INFO records are shown as they come, and a last line gives the time taken.

    Args:
        config: the session's pytest config (its capture manager and terminal reporter are used).
        what: what is being built, e.g. "sandbox images gagar/python, gagar/minimal".
        expected: how long it usually takes, in words, e.g. "about 3.5 min on 2 cores".
        logger: the logger whose INFO records are progress.
    """
    terminal = _Terminal(config)
    prefix = "[gagar test setup] "
    started = time.monotonic()
    done = threading.Event()
    spoke = threading.Event()

    def heartbeat() -> None:
        if done.wait(QUIET_SECONDS):
            return
        spoke.set()
        terminal.line(f"{prefix}building {what} on first use ({expected}); later runs reuse it")
        while not done.wait(HEARTBEAT_SECONDS):
            terminal.line(f"{prefix}still building {what}: {time.monotonic() - started:.0f} s so far")

    handler = _ToTerminal(terminal, prefix)
    source = logging.getLogger(logger)
    level = source.level
    capture = config.pluginmanager.get_plugin("capturemanager")
    # Captured output is swallowed while the block runs: let the build's lines through to the terminal.
    uncaptured = capture.global_and_fixture_disabled() if capture is not None else _nothing()
    with uncaptured:
        thread = threading.Thread(target=heartbeat, name="gagar-build-progress", daemon=True)
        source.addHandler(handler)
        if source.getEffectiveLevel() > logging.INFO:
            source.setLevel(logging.INFO)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()
            source.removeHandler(handler)
            source.setLevel(level)
            if spoke.is_set():
                terminal.line(f"{prefix}{what}: done in {time.monotonic() - started:.0f} s")


@contextmanager
def _nothing() -> Iterator[None]:
    yield
