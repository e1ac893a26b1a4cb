"""A grading transcript: one JSON line per event (message, tool call, tool result, retry, usage, outcome).

Written as it happens to a hidden temporary file next to `path` (`.NAME.<random>.tmp`, flushed after
each event), which replaces `path` atomically on `close()`: a rerun that fails never leaves a cut
transcript in place of a complete one, and a killed grading still leaves everything up to that moment in
the temporary file.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import IO, Any

from grader.util.atomic import replacing
from grader.util.jsontext import loads


class Transcript:
    """Appends events to `path` (or keeps them in memory only when `path` is None). Not thread-safe: one
    grading writes its own transcript.

    Args:
        path: where the transcript goes on `close()` (its folder is made); None keeps events in memory only.

    Raises:
        OSError: the folder or the temporary file cannot be made.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.events: list[dict[str, Any]] = []
        self._start = time.monotonic()
        self._handle: IO[str] | None = None
        self._writer: contextlib.AbstractContextManager[IO[str]] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = replacing(path)
            self._handle = self._writer.__enter__()

    def event(self, kind: str, **data: Any) -> dict[str, Any]:
        """Record one event: kept in `events` and written out at once (values JSON cannot hold as `str`).

        Args:
            kind: the event's `type` ("message", "tool_call", "retry", "learnt"...).
            **data: its fields.

        Returns:
            The record, with `t` (seconds since the transcript began) and `type`.

        Raises:
            OSError: the line cannot be written (the event is kept in `events`).
        """
        record = {"t": round(time.monotonic() - self._start, 4), "type": kind, **data}
        self.events.append(record)
        if self._handle is not None:
            self._handle.write(json.dumps(record, default=str) + "\n")
            self._handle.flush()
        return record

    def close(self) -> None:
        """Put the transcript in place at `path` (atomically). Raises OSError when it cannot be written."""
        if self._writer is not None:
            writer, self._writer, self._handle = self._writer, None, None
            writer.__exit__(None, None, None)


def read_transcript(path: Path | str) -> list[dict[str, Any]]:
    """The events of a transcript file, in order.

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not UTF-8 JSON lines (a line cut by a killed writer, a line nested deeper than the
            JSON reader goes, or not a transcript).
    """
    with open(path, encoding="utf-8") as handle:
        return [loads(line) for line in handle if line.strip()]
