"""The resources object: bounds on concurrent work, one per kind of resource, given once and honoured where
each resource is used.

LLM requests are cheap for this machine but bounded by the endpoint; sandboxes cost memory and processes;
workspace builds cost CPU. One grading holds at most one of each at a time, so the three bounds compose.

The bounds are per process: every grading given the same object (by `GradingOptions.concurrency`, or the
process default when none is given) shares its semaphores. Across processes nothing is shared: a Ray actor
gets a copy of the settings (the object pickles as its numbers) and so bounds its own gradings by them.
Time spent waiting for a slot is not a grading's fault: it neither fails a group nor counts against its
wall-time budget (see `LLMGrader`).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Concurrency:
    """Semaphores shared by every grading that is given this object (thread-safe)."""

    llm_calls: int = field(default=32, metadata={"cli": "--max-llm-calls"})
    """LLM requests in flight at once, over every grading in the process."""
    sandboxes: int = field(default=4, metadata={"cli": "--max-sandboxes"})
    """Sandboxes (Docker containers, local sandboxes) open at once."""
    workspace_builds: int = field(
        default_factory=lambda: 2 * max(1, os.cpu_count() or 1), metadata={"cli": "--max-workspace-builds"}
    )
    """Workspace builds at once (default: twice the cores; builds mostly wait on git processes)."""

    def __post_init__(self) -> None:
        for name in ("llm_calls", "sandboxes", "workspace_builds"):
            if getattr(self, name) < 1:
                raise ValueError(f"Concurrency.{name} must be at least 1")
        self.llm = threading.BoundedSemaphore(self.llm_calls)
        self.sandbox = threading.BoundedSemaphore(self.sandboxes)
        self.workspace = threading.BoundedSemaphore(self.workspace_builds)

    def __getstate__(self) -> dict[str, Any]:
        # Semaphores do not travel between processes; the settings do, and the copy makes its own.
        return {
            "llm_calls": self.llm_calls,
            "sandboxes": self.sandboxes,
            "workspace_builds": self.workspace_builds,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__post_init__()


_DEFAULT = Concurrency()


def default_resources() -> Concurrency:
    """The process's own resources object, used by every grading given none."""
    return _DEFAULT
