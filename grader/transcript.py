"""A grading transcript: one JSON line per event (message, tool call, tool result, retry, usage, outcome).

Written as it happens, so a grading that is killed still leaves everything up to that moment on disk.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class Transcript:
    """Appends events to `path` (or keeps them in memory only when `path` is None)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.events: list[dict[str, Any]] = []
        self._start = time.monotonic()
        self._handle = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def event(self, kind: str, **data: Any) -> dict[str, Any]:
        record = {"t": round(time.monotonic() - self._start, 4), "type": kind, **data}
        self.events.append(record)
        if self._handle is not None:
            self._handle.write(json.dumps(record, default=str) + "\n")
            self._handle.flush()
        return record

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def read_transcript(path: Path | str) -> list[dict[str, Any]]:
    """The events of a transcript file, in order."""
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
