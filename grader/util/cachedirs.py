"""Where gagar keeps what it reuses between runs: the two cache roots, named once.

- `data_cache()`: what a run reads and writes for itself (mirrors, prepared benchmarks). `$GAGAR_CACHE`
  moves it, so a test session or a second user can keep its own.
- `machine_cache()`: what stands for state of the whole machine or its Docker engine (locks around image and
  layer builds, their logs, downloaded Debian packages, pinned SWE-bench tables, compiled servers). It ignores
  `$GAGAR_CACHE` on purpose: two runs with different data caches still share one engine, and a lock kept in
  each run's own folder would let both build the same image at once.

Both follow `$XDG_CACHE_HOME` (default `~/.cache`) under a `gagar` folder.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_CACHE_VARIABLE = "GAGAR_CACHE"


def machine_cache() -> Path:
    """`$XDG_CACHE_HOME/gagar`, else `~/.cache/gagar` (not created here)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gagar"


def data_cache() -> Path:
    """`$GAGAR_CACHE`, else `machine_cache()` (not created here)."""
    root = os.environ.get(DATA_CACHE_VARIABLE)
    return Path(root) if root else machine_cache()
