"""What a build no longer redoes (grader.workspace.bare): the repository laid out without git, the base
memoized, refs
packed in one write, removal off the grading's path; and that git reads all of it as its own."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from grader.errors import GitError
from grader.workspace import bare
from grader.workspace.mirrors import MirrorCache
from grader.workspace.workspace import BASE, open_workspace
from tests.conftest import FIX, RepoFactory, run_git


@contextmanager
def git_processes() -> Iterator[list[str]]:
    """The git subcommands started inside the block (counted, then run as usual)."""
    started: list[str] = []
    spawn = subprocess.Popen.__init__

    def counting(self, args, *rest, **kwargs):  # type: ignore[no-untyped-def]
        if list(args)[:1] == ["git"]:
            started.append(next(a for a in args[1:] if not a.startswith("-") and a != "-c" and "=" not in a))
        spawn(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = counting  # type: ignore[method-assign]
    try:
        yield started
    finally:
        subprocess.Popen.__init__ = spawn  # type: ignore[method-assign]


def git_in(git_dir: Path, *args: str) -> str:
    proc = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_bare_layout_and_packed_refs_are_a_repository_git_accepts(
    repo: RepoFactory, tmp_path: Path
) -> None:
    git_dir = tmp_path / "ws.git"
    bare.init_bare(git_dir, repo.path / ".git" / "objects", head="refs/heads/base")
    assert git_in(git_dir, "rev-parse", "--is-bare-repository").strip() == "true"
    tree = git_in(git_dir, "rev-parse", f"{repo.base}^{{tree}}").strip()  # read through the alternates
    bare.write_packed_refs(git_dir, {"refs/heads/base": repo.base, "refs/failing/x-1": repo.base})
    assert git_in(git_dir, "for-each-ref", "--format=%(refname) %(objectname)").splitlines() == [
        f"refs/failing/x-1 {repo.base}",
        f"refs/heads/base {repo.base}",
    ]
    assert git_in(git_dir, "rev-parse", "HEAD^{tree}").strip() == tree
    git_in(git_dir, "fsck", "--no-dangling")
    with pytest.raises(FileExistsError):
        bare.init_bare(git_dir, repo.path / ".git" / "objects", head="refs/heads/base")
    for bad in ({"refs/heads/a..b": repo.base}, {"heads/x": repo.base}, {"refs/heads/x": "abc"}):
        with pytest.raises(ValueError):
            bare.write_packed_refs(git_dir, bad)


def test_the_base_is_resolved_and_read_once_per_process_for_a_full_id(
    repo: RepoFactory, tmp_path: Path
) -> None:
    memo = bare.BaseMemo()
    objects = repo.path / ".git" / "objects"
    git_dir = tmp_path / "ws.git"
    bare.init_bare(git_dir, objects, head="refs/heads/base")
    short = repo.base[:10]
    expected_tree = run_git(repo.path, "rev-parse", "HEAD^{tree}").strip()
    with git_processes() as started:
        assert memo.resolve(git_dir, objects, repo.base) == (repo.base, expected_tree)
        assert memo.resolve(git_dir, objects, repo.base) == (repo.base, expected_tree)
        assert memo.resolve(git_dir, objects, short) == (repo.base, expected_tree)
        assert memo.resolve(git_dir, objects, short) == (repo.base, expected_tree)
        first, second = tmp_path / "a.index", tmp_path / "b.index"
        memo.write_index(git_dir, expected_tree, first)
        memo.write_index(git_dir, expected_tree, second)
    # A full id is resolved once; a short one (it could name another commit after a fetch) every time.
    assert started == ["rev-parse", "rev-parse", "rev-parse", "read-tree"]
    assert first.read_bytes() == second.read_bytes()
    listing = subprocess.run(
        ["git", f"--git-dir={git_dir}", "ls-files", "--stage"],
        env={"GIT_INDEX_FILE": str(second), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "pkg/core.py" in listing and "tests/test_core.py" in listing
    with pytest.raises(GitError):
        memo.resolve(git_dir, objects, "0" * 40)
    small = bare.BaseMemo(max_index_bytes=1)  # an index larger than the bound is not kept
    small.write_index(git_dir, expected_tree, first)
    with git_processes() as started:
        small.write_index(git_dir, expected_tree, first)
    assert started == ["read-tree"]


def test_removal_leaves_the_path_at_once_and_the_files_soon(tmp_path: Path) -> None:
    release = threading.Event()
    removed: list[Path] = []

    def slow_rmtree(path: Path) -> None:
        release.wait(10)
        removed.append(path)
        subprocess.run(["rm", "-rf", str(path)], check=True)

    remover = bare.Remover(slow_rmtree)
    target = tmp_path / "ws"
    (target / "objects" / "ab").mkdir(parents=True)
    (target / "objects" / "ab" / "cd").write_text("x")
    remover.remove(target)
    assert not target.exists()  # gone from its path before the (slow) deletion ran
    assert [p.name for p in tmp_path.iterdir()] == [".ws.removing"]
    release.set()
    remover.drain()
    assert removed == [tmp_path / ".ws.removing"] and list(tmp_path.iterdir()) == []
    remover.remove(tmp_path / "missing")  # nothing there: nothing to do, no error
    remover.drain()


def test_a_forked_child_removes_with_its_own_thread(tmp_path: Path) -> None:
    remover = bare.Remover()
    (tmp_path / "started").mkdir()
    remover.remove(tmp_path / "started")  # the parent's thread is running when it forks
    remover.drain()
    target = tmp_path / "in-child"
    (target / "a").mkdir(parents=True)
    pid = os.fork()
    if pid == 0:  # the child: remove, drain, and report through the exit status only
        try:
            remover.remove(target)
            remover.drain()
            os._exit(0 if not target.exists() and not (tmp_path / ".in-child.removing").exists() else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert list(tmp_path.iterdir()) == []


def test_the_first_build_of_a_task_reads_its_base_files_in_one_process(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    group = repo.group(
        {
            "a": (repo.patch(FIX), True),
            "b": (repo.patch({"pkg/util.py": "def clamp(x, lo, hi):\n    return x\n"}), True),
            "c": (repo.patch({"tests/test_core.py": "def test_add():\n    pass\n"}), False),
            "d": (repo.patch({"pkg/new.py": "x = 1\n"}), False),
        }
    )
    with git_processes() as started, open_workspace(group, mirrors=mirrors) as ws:
        assert all(c.apply_method == "plain" for c in ws.candidates.values())
    # A new task: its mirror is made and its base resolved; then one read of every patch's base files.
    built = started[started.index("rev-parse") :]
    assert built == ["rev-parse", "cat-file", "diff-tree"], started


def test_a_build_of_exact_patches_runs_only_one_diff_tree_and_applies_a_repeated_patch_once(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    fix = repo.patch(FIX)
    group = repo.group(
        {"a": (fix, True), "same-as-a": (fix, True), "other": (repo.patch({"README.md": "x\n"}), False)}
    )
    with open_workspace(group, mirrors=mirrors):
        pass  # the mirror, the base and the files the patches touch are now known to this process
    with git_processes() as started, open_workspace(group, mirrors=mirrors) as ws:
        # Both distinct patches sit where their headers say: applied in process (exactapply), verified by git.
        assert started == ["diff-tree"]
        a, same = ws.candidates["a"], ws.candidates["same-as-a"]
        assert (a.apply_method, same.apply_method) == ("plain", "plain")
        assert a.commit != same.commit  # each trajectory still has its own commit
        assert ws.diff("same-as-a") == ws.diff("a") and "return a + b" in ws.diff("a")
        assert a.patch_class == same.patch_class and ws.classes == [["a", "same-as-a"]]
        assert a.stats == same.stats and a.stats is not same.stats
        assert ws.refs() == [
            "refs/failing/other",
            "refs/heads/base",
            "refs/heads/candidates/a",
            "refs/heads/candidates/same-as-a",
        ]
        assert ws.commit_of(BASE) == repo.base
        path = ws.path
    assert not path.exists()


def test_workspaces_go_where_asked_else_to_a_roomy_tmpfs(
    repo: RepoFactory, mirrors: MirrorCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = repo.group({"good": (repo.patch(FIX), True), "bad": ("", False)})
    monkeypatch.setenv(bare.ENV_WORKSPACES, str(tmp_path / "workspaces"))
    with open_workspace(group, mirrors=mirrors) as ws:
        assert ws.path.parent == tmp_path / "workspaces" and ws.gradable() == ["good"]
    bare.remover.drain()
    assert list((tmp_path / "workspaces").iterdir()) == []
    monkeypatch.delenv(bare.ENV_WORKSPACES)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the user's choice of temporary directory is kept
    assert bare.workspace_parent() is None
    monkeypatch.delenv("TMPDIR")
    mounts = Path("/proc/mounts").read_text()
    shm_is_tmpfs = any(line.split()[1:3] == ["/dev/shm", "tmpfs"] for line in mounts.splitlines())
    roomy = shm_is_tmpfs and (lambda s: s.f_bavail * s.f_frsize)(os.statvfs("/dev/shm")) >= bare.MIN_SHM_FREE
    assert bare.workspace_parent() == (Path("/dev/shm") if roomy else None)
    monkeypatch.setattr(bare, "MIN_SHM_FREE", 1 << 60)  # a container's 64 MiB /dev/shm: not used
    assert bare.workspace_parent() is None


def test_builds_share_the_apply_threads_in_order_within_their_limit() -> None:
    running, most = [0], [0]
    lock = threading.Lock()

    def slow_square(x: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        threading.Event().wait(0.02)
        with lock:
            running[0] -= 1
        return x * x

    assert bare.map_on_pool(slow_square, list(range(12)), limit=3) == [x * x for x in range(12)]
    assert most[0] == 3  # never more in flight than the build asked for
    threads = {t.name for t in threading.enumerate() if t.name.startswith("gagar-apply")}
    bare.map_on_pool(slow_square, list(range(6)), limit=6)
    assert {t.name for t in threading.enumerate() if t.name.startswith("gagar-apply")} >= threads  # reused

    pid = os.fork()  # a child forked after the threads started builds with threads of its own
    if pid == 0:
        try:
            signal.alarm(10)  # without its own threads the child would wait forever: fail instead
            os._exit(0 if bare.map_on_pool(abs, [-1, -2, -3], limit=2) == [1, 2, 3] else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0

    def fails(x: int) -> int:
        raise ValueError(f"item {x}")

    with pytest.raises(ValueError, match="item"):
        bare.map_on_pool(fails, [1, 2], limit=2)
