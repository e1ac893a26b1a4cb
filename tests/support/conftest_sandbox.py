"""Helpers for the sandbox tests: a real git repository with one branch per target, and a TreeSource on it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grader.workspace.archives import TreeChanges, changes
from grader.workspace.gitcmd import safe_env

BASE_FILES = {
    "a.txt": "base\n",
    "pkg/__init__.py": "def add(a, b):\n    return a + b\n",
    "tests/test_add.py": "from pkg import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
}
CANDIDATES = {
    "A": {"a_only.txt": "A\n"},
    "B": {"b_only.txt": "B\n", "a.txt": "changed by B\n"},
}


class WholeGitTrees:
    """TreeSource over real branches: `git archive <branch>` per target."""

    def __init__(self, repo: Path, branches: dict[str, str]) -> None:
        self.repo, self.branches = repo, branches

    def targets(self) -> list[str]:
        return list(self.branches)

    def archive(self, target: str) -> bytes:
        return subprocess.run(
            ["git", "-C", str(self.repo), "archive", self.branches[target]], capture_output=True, check=True
        ).stdout


class GitTrees(WholeGitTrees):
    """`WholeGitTrees` that also gives a candidate's tree by its changes from base's, as a workspace does."""

    def changes(self, target: str) -> TreeChanges | None:
        if target == "base":
            return None
        return changes(self.repo / ".git", self.branches["base"], self.branches[target])


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], env=safe_env(), check=True, capture_output=True)


def _commit(repo: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)


def make_repo(root: Path) -> GitTrees:
    """A repository with a base commit and branches A and B on top; the TreeSource over it."""
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _commit(repo, BASE_FILES, "base")
    for name, files in CANDIDATES.items():
        _git(repo, "checkout", "-q", "-b", name, "main")
        _commit(repo, files, name)
    _git(repo, "checkout", "-q", "main")
    return GitTrees(repo, {"base": "main", **{name: name for name in CANDIDATES}})


_ROOT = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = [{root!r}]
    from tests.support.conftest_sandbox import make_repo
    from pathlib import Path
    from grader.sandbox import Limits, open_sandbox
    Path({tmp!r}).mkdir(parents=True, exist_ok=True)
    sb = open_sandbox(make_repo(Path({tmp!r})), backend={backend!r}, limits=Limits(**{limits!r}))
    sb.exec("A", "true")
    print(getattr(sb, "container_id", None) or sb._root, flush=True)
    time.sleep(120)
    """
)


def spawn_grader(
    tmp_path: Path, backend: str, limits: dict[str, float] | None = None
) -> tuple[subprocess.Popen[str], str]:
    """A grading process in a subprocess: it opens a sandbox with `limits`, runs one command and waits.

    Returns the process and its sandbox's handle (container id, or root dir for `local`).
    """
    code = CHILD.format(root=str(_ROOT), tmp=str(tmp_path), backend=backend, limits=limits or {})
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    handle = proc.stdout.readline().strip()
    assert handle, "the child grader did not start"
    return proc, handle


def docker_marks() -> list[pytest.MarkDecorator]:
    """The marks of a module of Docker tests: `docker`, and a skip naming the cause when no engine answers."""
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine to test against
        return [pytest.mark.docker, pytest.mark.skip(reason=f"no Docker engine reachable: {exc}")]
    return [pytest.mark.docker]
