"""Bounds on concurrent work, set separately for each kind of resource.

LLM requests are cheap for this machine but bounded by the endpoint; sandboxes cost memory and processes;
workspace builds cost CPU. One grading holds at most one of each at a time, so the three bounds compose.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field


@dataclass
class Concurrency:
    """Semaphores shared by every grading that is given this object (thread-safe)."""

    llm_calls: int = 32
    sandboxes: int = 4
    # Builds mostly wait on git processes; twice the cores keeps the CPU busy without thrashing.
    workspace_builds: int = field(default_factory=lambda: 2 * max(1, os.cpu_count() or 1))

    def __post_init__(self) -> None:
        for name in ("llm_calls", "sandboxes", "workspace_builds"):
            if getattr(self, name) < 1:
                raise ValueError(f"Concurrency.{name} must be at least 1")
        self.llm = threading.BoundedSemaphore(self.llm_calls)
        self.sandbox = threading.BoundedSemaphore(self.sandboxes)
        self.workspace = threading.BoundedSemaphore(self.workspace_builds)
