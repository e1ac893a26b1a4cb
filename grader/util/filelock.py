"""An exclusive lock on a file, across threads and processes: how caches shared by workers stay whole."""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def file_lock(path: Path, *, waiting: Callable[[], object] | None = None) -> Iterator[None]:
    """Hold an exclusive `flock` on `path` (created, with its folder, when missing) for the block.

    Args:
        path: the lock file.
        waiting: called once, before blocking, when another holder has the lock: a build that waits tens of
            minutes for another process's build says so instead of waiting in silence.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
