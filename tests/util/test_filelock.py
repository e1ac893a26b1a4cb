"""`file_lock` across processes: the second holder waits, and says it waits, only when it must."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from grader.util.filelock import file_lock

HOLDER = """
import sys, time
from pathlib import Path
from grader.util.filelock import file_lock
with file_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    print("letting go", flush=True)
"""


def test_a_lock_held_by_another_process_is_waited_for_and_said(tmp_path: Path) -> None:
    lock = tmp_path / "locks" / "build.lock"
    argv = [sys.executable, "-c", HOLDER, str(lock), "1.5"]
    holder = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    said: list[str] = []
    with file_lock(lock, waiting=lambda: said.append("waiting")):
        # The holder wrote this line before it let go: it is there the moment the lock is ours.
        assert holder.stdout.readline() == "letting go\n"
    holder.wait(10)
    assert said == ["waiting"]


def test_a_free_lock_says_nothing(tmp_path: Path) -> None:
    said: list[int] = []
    with file_lock(tmp_path / "free.lock", waiting=lambda: said.append(1)):
        pass
    assert said == []
