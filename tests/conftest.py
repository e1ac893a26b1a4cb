"""Shared fixtures: real git repositories and patches made by real `git diff`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from grader.errors import ImageBuildError
from grader.graders.llm.agent import LLMGrader
from grader.groups.models import Group, Task, Trajectory, complete_group
from grader.sandbox.interpreters import Interpreter
from grader.workspace.gitcmd import git_identity, safe_env
from grader.workspace.mirrors import MirrorCache
from tests.support.progress import build_progress

# The real llama.cpp server, one per session (its fixture builds or reuses it, or skips with the reason).
pytest_plugins = ["tests.support.llama_support"]

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_GROUP = REPO_ROOT / "examples" / "inventory_group.json"

BASE_FILES = {
    "pkg/__init__.py": "",
    "pkg/core.py": "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
    "pkg/util.py": "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
    "tests/test_core.py": "from pkg.core import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    "README.md": "demo\n",
}

_GIT_ENV = safe_env(git_identity("t", "t@localhost", date="2024-01-01T00:00:00+0000"))


def run_gagar(
    *args: str, timeout: float = 600, module: str = "grader.cli", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The `gagar` command line (or another entry `module`), run as a new user would, from the repository
    root, its output a pipe."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def llm_grader(base_url: str, transcript_dir: Path, *, model: str = "scripted", **options: Any) -> LLMGrader:
    """The LLM grader as the tests build it: `model` at `base_url`, transcripts in `transcript_dir`, no
    sandbox and seed 7 unless `options` say otherwise (any other `LLMGrader` keyword goes there too)."""
    settings: dict[str, Any] = {"sandbox": None, "seed": 7, **options}
    return LLMGrader(model, base_url=base_url, transcript_dir=transcript_dir, **settings)


def run_git(repo: Path, *args: str, input: str | None = None) -> str:
    # Bytes, not text mode: universal newlines would turn a CRLF diff into an LF one.
    proc = subprocess.run(
        ["git", *args],
        cwd=repo,
        env=_GIT_ENV,
        input=None if input is None else input.encode(),
        check=True,
        capture_output=True,
    )
    return proc.stdout.decode("utf-8", "surrogateescape")


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Mirrors go to a per-session temporary cache, never the user's."""
    cache = tmp_path_factory.getbasetemp() / "gagar-cache"
    monkeypatch.setenv("GAGAR_CACHE", str(cache))
    return cache


@pytest.fixture(scope="session", autouse=True)
def leaves_no_containers() -> Iterator[None]:
    """Fails the session (an error at its last teardown) when it leaves containers labelled as gagar's.

    Counted: containers made while the session ran that carry gagar's labels and are not in use, i.e. a
    sandbox (`gagar.sandbox`) this process still owns or whose owner is gone, and a stopped container of a
    build step (it carries its base image's `gagar.content-hash`: the engine keeps a failed step's container
    unless told to remove it). On an engine other sessions share, leftovers they make meanwhile count too."""
    started = time.time() - 1.0
    yield
    try:
        import docker

        client = docker.from_env()
        client.ping()
    except Exception:  # noqa: BLE001 - no engine: nothing can have been left on it
        return
    from grader.sandbox.images import HASH_LABEL
    from grader.sandbox.leftovers import LABEL, LABEL_PID, owner_alive

    def made_meanwhile(attrs: dict[str, Any]) -> bool:
        created = datetime.strptime(attrs["Created"][:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
        return created.timestamp() >= started

    def leftovers() -> dict[str, str]:
        left = {}
        for container in client.containers.list(all=True, sparse=False):
            labels = container.attrs["Config"].get("Labels") or {}
            if not made_meanwhile(container.attrs):
                continue
            if LABEL in labels:
                if labels.get(LABEL_PID) == str(os.getpid()) or not owner_alive(labels):
                    left[container.id] = f"{container.name} (sandbox, {container.status})"
            # A build in progress (another session's) has a running or just-created step container.
            elif HASH_LABEL in labels and container.status in ("exited", "dead"):
                command = " ".join(container.attrs["Config"].get("Cmd") or [])[:120]
                left[container.id] = f"{container.name} (build step {command!r}, {container.status})"
        return left

    left = leftovers()
    if left:  # a container being removed right now is not left behind: look again
        time.sleep(3)
        left = {key: text for key, text in leftovers().items() if key in left}
    assert not left, f"the test session left {len(left)} gagar containers: {'; '.join(left.values())}"


def _skip_without_engine() -> None:
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:  # noqa: BLE001 - any failure means: no engine to build on
        pytest.skip(f"no Docker engine reachable: {exc}")


def _skip_without_debootstrap(exc: ImageBuildError) -> None:
    """Skip naming the Debian package when debootstrap is what the build lacked; otherwise let it fail."""
    if shutil.which("debootstrap") is None:
        pytest.skip(f"cannot build the sandbox images offline: {exc}")


@pytest.fixture(scope="session")
def sandbox_images(request: pytest.FixtureRequest) -> None:
    """The sandbox images `gagar/python` and `gagar/minimal`, built on first use as `gagar images build
    --offline` builds them (debootstrapped from the Debian mirror: no registry), with progress on the
    terminal; a no-op when they are up to date.

    Skips naming the cause when no engine answers or `debootstrap` is not installed (the Debian package is
    named; tests never install system packages); any other build failure is an error."""
    from grader.sandbox.images import build_images

    _skip_without_engine()
    what = "the sandbox images gagar/python and gagar/minimal"
    with build_progress(request.config, what, "about 3.5 min: debootstrap from the Debian mirror"):
        try:
            build_images(offline=True, install_debootstrap=False)
        except ImageBuildError as exc:
            _skip_without_debootstrap(exc)
            raise


@pytest.fixture(scope="session")
def interpreter_image(request: pytest.FixtureRequest) -> str:
    """The tag of the Python 3.9 interpreter image (Debian bullseye) that the tests' environment layers build
    on, debootstrapped on first use with progress on the terminal. Skips as `sandbox_images` does."""
    from grader.sandbox.images import build_interpreter_image, interpreter_tag

    _skip_without_engine()
    interpreter = Interpreter("3.9", "bullseye")
    what = f"the interpreter image {interpreter_tag(interpreter)}"
    with build_progress(request.config, what, "about 3 min: debootstrap from the Debian mirror"):
        try:
            return build_interpreter_image(interpreter, install_debootstrap=False).tag
        except ImageBuildError as exc:
            _skip_without_debootstrap(exc)
            raise


@pytest.fixture
def mirrors(tmp_path: Path) -> MirrorCache:
    return MirrorCache(tmp_path / "mirrors")


class RepoFactory:
    """A real git repository with one base commit, and patches against it made by `git diff`."""

    def __init__(self, path: Path, files: dict[str, str]) -> None:
        self.path = path
        path.mkdir(parents=True)
        run_git(path, "init", "--quiet", "--initial-branch=main")
        for name, text in files.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_bytes(text.encode())
        run_git(path, "add", "-A")
        run_git(path, "commit", "--quiet", "-m", "base")
        self.base = run_git(path, "rev-parse", "HEAD").strip()

    def patch(self, edits: dict[str, str | None], binary: bool = False, context: int = 3) -> str:
        """The diff that sets each path to its text (None deletes it), leaving the repository as it was."""
        for name, text in edits.items():
            target = self.path / name
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(text.encode())
        run_git(self.path, "add", "-A")
        diff = run_git(self.path, "diff", "--cached", f"-U{context}", *(["--binary"] if binary else []))
        run_git(self.path, "reset", "--quiet", "--hard", "HEAD")
        run_git(self.path, "clean", "-fdq")
        return diff

    def group(self, patches: dict[str, tuple[str, bool]], group_id: str = "g1", **task: str) -> Group:
        trajectories = [
            Trajectory(id=tid, patch=patch, passed=passed) for tid, (patch, passed) in patches.items()
        ]
        return complete_group(
            Group(
                group_id=group_id,
                task=Task(repo=str(self.path), base_commit=self.base, statement="fix add", **task),
                trajectories=trajectories,
            )
        )


@pytest.fixture
def repo(tmp_path: Path) -> RepoFactory:
    return RepoFactory(tmp_path / "repo", BASE_FILES)


@pytest.fixture
def make_repo(tmp_path: Path) -> Callable[..., RepoFactory]:
    counter = iter(range(1000))
    return lambda files: RepoFactory(tmp_path / f"repo{next(counter)}", files)


FIX = {"pkg/core.py": BASE_FILES["pkg/core.py"].replace("a - b", "a + b")}
