"""The README's Python examples run as written."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_python_blocks_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", (REPO_ROOT / "README.md").read_text(), flags=re.S)
    assert len(blocks) >= 2
    for block in blocks:
        proc = subprocess.run([sys.executable, "-c", block], cwd=REPO_ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
