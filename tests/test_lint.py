"""The code base stays ruff clean (lint and format), as the developers' guide asks."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import REPO_ROOT

RUFF = shutil.which("ruff")
# The project's own folders only: a virtual environment a user makes inside the clone is not ours to lint.
SOURCES = ["grader", "tests", "bench", "examples", "prompts"]


@pytest.mark.skipif(RUFF is None, reason="ruff is not installed (pip install -e '.[dev]')")
@pytest.mark.parametrize(
    "command", [["check", *SOURCES], ["format", "--check", *SOURCES]], ids=["check", "format"]
)
def test_ruff(command: list[str]) -> None:
    proc = subprocess.run([RUFF, *command], cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
