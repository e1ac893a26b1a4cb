"""Every benchmark under bench/ still starts: a script that imports a name the code no longer has (as
bench/workspace.py did after the regrouping) fails here, not when someone next times a change."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

SCRIPTS = sorted(p.stem for p in (REPO_ROOT / "bench").glob("*.py") if p.stem not in {"__init__", "args"})


def test_every_script_is_listed() -> None:
    assert "workspace" in SCRIPTS and len(SCRIPTS) >= 15


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_script_starts_and_shows_its_help(name: str) -> None:
    # import_graph takes a checkout's root, not options: run it, on this checkout.
    argv = [] if name == "import_graph" else ["--help"]
    proc = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip()
