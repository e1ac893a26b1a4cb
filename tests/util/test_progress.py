"""A fixture's build progress reaches the terminal though pytest captures output; a cache hit says nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

INNER = """
import logging, time
import pytest
import tests.support.progress as progress

progress.QUIET_SECONDS, progress.HEARTBEAT_SECONDS = 0.5, 1.0


@pytest.fixture(scope="session")
def slow(request):
    with progress.build_progress(request.config, "the slow thing", "about 3 s"):
        time.sleep(1.0)
        logging.getLogger("grader.sandbox.images").info("debootstrapping the slow thing")
        time.sleep(1.8)


@pytest.fixture(scope="session")
def cached(request):
    with progress.build_progress(request.config, "the cached thing", "about 3 s"):
        pass


def test_uses_both(cached, slow):
    print("captured: a test's own output stays captured")
"""


def test_a_slow_build_shows_its_progress_and_a_cached_one_nothing(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_inner.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[gagar test setup]")]
    first = "[gagar test setup] building the slow thing on first use (about 3 s); later runs reuse it"
    assert lines[0] == first
    assert "[gagar test setup] debootstrapping the slow thing" in lines
    assert any(line.startswith("[gagar test setup] still building the slow thing: ") for line in lines)
    assert lines[-1].startswith("[gagar test setup] the slow thing: done in ")
    assert not any("cached thing" in line for line in lines)
    assert "captured:" not in proc.stdout
