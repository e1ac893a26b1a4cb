"""Each example in examples/integrations runs as `python examples/integrations/<name>.py` and prints."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

EXAMPLES = REPO_ROOT / "examples" / "integrations"
# What each example imports beyond gagar; an example whose framework is not installed is skipped.
NEEDS = {
    "verl_grpo.py": ("torch", "verl"),
    "trl_grpo.py": ("torch", "trl"),
    "slime_grpo.py": ("torch",),
    "openrlhf_group_norm.py": ("torch",),
}


def test_every_example_is_listed() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(NEEDS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NEEDS))
def test_example_runs(name: str) -> None:
    missing = [m for m in NEEDS[name] if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"{name} needs {', '.join(missing)} (pip install 'gagar[integrations]')")
    # Run as a script, the example's own folder is first on sys.path, not the repository: add it so the
    # example runs from a checkout that was not pip-installed too.
    paths = [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "before" in proc.stdout and "after" in proc.stdout
