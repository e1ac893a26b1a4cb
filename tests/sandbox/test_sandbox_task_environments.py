"""Probes in real task environments import the target's own code, wherever they run from.

The layers of SWE-bench tasks install the repository into the image (the base commit's code) and set a
relative `PYTHONPATH` (`src:.`). A probe that changes directory, or a test that starts a subprocess elsewhere
(pytest's `pytester`), must still import the tree of the target it runs on: here a src-layout repository
(pytest-dev/pytest) and a flat one (sympy), each on its base tree and on a candidate that changes what one
function returns. Needs the prepared benchmark (`gagar bench prepare swebench-lite`), the task repositories'
mirrors (`$GAGAR_SOURCE_ROOT`, default /work/sources) and Docker; the first build of a layer takes minutes.
"""

from __future__ import annotations

import io
import os
import shlex
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from grader.groups.formats import load_group_file
from grader.sandbox.environments import open_task_sandbox
from grader.util.cachedirs import data_cache
from tests.support.conftest_sandbox import docker_marks

# Read before the session's isolated cache takes over $GAGAR_CACHE.
PREPARED = data_cache() / "benchmarks" / "swebench-lite" / "verification" / "groups" / "verification.jsonl"
SOURCES = Path(os.environ.get("GAGAR_SOURCE_ROOT", "/work/sources"))

# group -> (module, function, the file the candidate changes): the candidate redefines the function at the
# end of its module, so it returns "candidate" where base returns what the base commit's code returns.
CASES = {
    "pytest-dev__pytest-7432": ("_pytest.compat", "ascii_escaped", "src/_pytest/compat.py"),
    "sympy__sympy-18621": ("sympy.utilities.misc", "filldedent", "sympy/utilities/misc.py"),
}

# One line per way of running: how, the imported module's file, the function's answer ("|" between them).
PROBE = """
import os, subprocess, sys, tempfile
code = "import {module} as m; print(m.__file__, repr(m.{function}('x')), sep='|')"
def show(how, cwd):
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True)
    print(how, out.stdout.strip() or out.stderr.strip()[-300:], sep="|")
root = os.getcwd()
print("root", root, "", sep="|")
show("from /", "/")
show("from a subdirectory", os.path.join(root, os.environ["SUBDIR"]))
os.chdir("/")
show("a subprocess started elsewhere", tempfile.mkdtemp())
"""

pytestmark = docker_marks()


class TaskTrees:
    """TreeSource of a task: its base commit from the repository's mirror, and one candidate changing a
    function; `task` as the grader's view has it."""

    def __init__(self, task: Any, mirror: Path, path: str, function: str) -> None:
        self.task = task
        base = subprocess.run(
            ["git", "-C", str(mirror), "archive", "--format=tar", "--end-of-options", task.base_commit],
            capture_output=True,
            check=True,
        ).stdout
        redefinition = f"\n\ndef {function}(*args, **kwargs):\n    return 'candidate'\n"
        self.trees = {"base": base, "changed": _appended(base, path, redefinition.encode())}

    def targets(self) -> list[str]:
        return list(self.trees)

    def archive(self, target: str) -> bytes:
        return self.trees[target]


def _appended(archive: bytes, path: str, text: bytes) -> bytes:
    """`archive` with `text` added at the end of the file `path`."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(archive)) as source, tarfile.open(fileobj=out, mode="w") as dest:
        for member in source:
            data = source.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            if member.name == path and data is not None:
                data += text
                member.size = len(data)
            dest.addfile(member, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def _group(group_id: str) -> Any:
    if not PREPARED.is_file():
        pytest.skip(
            f"the benchmark is not prepared ({PREPARED} is missing): gagar bench prepare swebench-lite"
        )
    group = next((g for g in load_group_file(PREPARED) if g.group_id == group_id), None)
    if group is None:  # `bench prepare --partial` without this instance's repository
        pytest.skip(f"{group_id} is not in the prepared benchmark ({PREPARED}): its repository was not there")
    return group


@pytest.mark.parametrize("group_id", sorted(CASES))
def test_a_probe_imports_its_targets_tree_from_anywhere(group_id: str, sandbox_images: None) -> None:
    module, function, path = CASES[group_id]
    group = _group(group_id)
    mirror = SOURCES / group.task.repo.rstrip("/").split("github.com/")[-1]
    if not (mirror / "HEAD").exists() and not (mirror / ".git").exists():
        pytest.skip(f"no mirror of {group.task.repo} at {mirror} (set GAGAR_SOURCE_ROOT)")
    trees = TaskTrees(group.task, mirror, path, function)
    probe = PROBE.format(module=module, function=function)
    subdir = path.split("/")[0]  # src/ or sympy/: a directory of the tree that is not its root
    compiled = path.replace(".py", "").rsplit("/", 1)
    pyc = f"{compiled[0]}/__pycache__/{compiled[1]}.cpython-*.pyc"
    with open_task_sandbox(trees, "docker") as sandbox:
        results = sandbox.exec_many(["base", "changed"], ["python", "-c", probe], env={"SUBDIR": subdir})
        answers = _answers(results, path)
        assert answers["changed"] == "'candidate'" and answers["base"] != "'candidate'", answers
        # Bytecode comes into the pristine trees before the first command, or past that wait in the background
        # (base's from the image's installed copy,
        # the changed file's compiled from its own source): wait for it; the same probe, now reading it, must
        # answer the same on each target.
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if all(r.ok for r in sandbox.exec_many(["base", "changed"], f"ls {pyc}").values()):
                break
            time.sleep(5)
        probe_again = f"ls {pyc} 2>/dev/null; python -c {shlex.quote(probe)}"
        again = sandbox.exec_many(["base", "changed"], probe_again, env={"SUBDIR": subdir})
    for target in ("base", "changed"):
        assert again[target].stdout.split("\n", 1)[0].endswith(".pyc"), again[target]
    assert _answers(again, path) == answers


def _answers(results: dict[str, Any], path: str) -> dict[str, str]:
    """What the function answered on each target, checking every way of running imported the target's file."""
    answers: dict[str, str] = {}
    for target, result in results.items():
        assert result.ok, (target, result)
        lines = [line.split("|") for line in result.stdout.splitlines() if "|" in line]
        (_, root, _), *ways = lines
        assert len(ways) == 3, (target, result)
        for how, where, answer in ways:
            assert where == f"{root}/{path}", (target, how, where, answer)  # the target's own file
            assert answers.setdefault(target, answer) == answer, (target, how, answer)
    return answers
