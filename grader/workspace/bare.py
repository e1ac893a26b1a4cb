"""A workspace's bare repository made and removed cheaply: what every build would otherwise redo.

Measured on the bundled example (2 cores, ext4): a build ran 17 git processes, 4 of them the same for every
group of a task (`init`, `rev-parse` of the base, `read-tree` of the base, `update-ref`), and removing the
workspace took ~100 ms of wall time inside the grading slot (one journaled `rmdir` per loose-object fan-out
directory). Here the repository is laid out without a process, the base's commit, tree and index are kept
per process (they never change for a full commit id), refs go into `packed-refs` in one write, and removal
runs on a background thread after the workspace has been renamed out of the way. Patches are applied on
threads started once per process, not per build (`map_on_pool`), and new workspaces go to a tmpfs when one
with room is available (`workspace_parent`).
"""

from __future__ import annotations

import atexit
import os
import queue
import re
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TypeVar

from grader.workspace.gitcmd import git, out

T = TypeVar("T")
R = TypeVar("R")
FULL_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
INDEX_MEMO_BYTES = 64 * 1024 * 1024
"""Most bytes of base indexes kept in memory per process (a 7,000-file repository's index is ~700 KB)."""

# What `git init --bare --template=` writes, less what a workspace never uses (description, hooks, info).
_CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"


def init_bare(git_dir: Path, alternate_objects: Path, head: str) -> None:
    """Lay out an empty SHA-1 bare repository that borrows objects from `alternate_objects`.

    Args:
        git_dir: the directory to create (its parent must exist; it must not).
        alternate_objects: the `objects` directory of the mirror it borrows from.
        head: the ref HEAD points to (it need not exist yet).

    Raises:
        FileExistsError: when `git_dir` already exists.
    """
    git_dir.mkdir()
    (git_dir / "objects" / "info").mkdir(parents=True)
    (git_dir / "objects" / "pack").mkdir()
    (git_dir / "refs" / "heads").mkdir(parents=True)
    (git_dir / "refs" / "tags").mkdir()
    (git_dir / "HEAD").write_text(f"ref: {head}\n")
    (git_dir / "config").write_text(_CONFIG)
    (git_dir / "objects" / "info" / "alternates").write_text(f"{alternate_objects}\n")


def write_packed_refs(git_dir: Path, refs: dict[str, str]) -> None:
    """Write every ref of a new repository in one `packed-refs` file (what `git pack-refs` would leave).

    Args:
        git_dir: the bare repository, which has no refs yet.
        refs: full ref name -> object id; names must already be valid (`workspace.ref_name` makes them so).

    Raises:
        ValueError: when a name is not a full ref under `refs/` or an id is not a full object id.
    """
    lines = ["# pack-refs with: peeled fully-peeled sorted \n"]
    for name in sorted(refs, key=lambda n: n.encode()):
        if not name.startswith("refs/") or any(c in name for c in " \n\t\\:?*[~^") or ".." in name:
            raise ValueError(f"not a valid ref name: {name!r}")
        if not FULL_ID.fullmatch(refs[name]):
            raise ValueError(f"ref {name!r}: {refs[name]!r} is not a full object id")
        lines.append(f"{refs[name]} {name}\n")
    tmp = git_dir / "packed-refs.lock"
    tmp.write_text("".join(lines))
    os.replace(tmp, git_dir / "packed-refs")


ENV_WORKSPACES = "GAGAR_WORKSPACES"
SHM = Path("/dev/shm")
MIN_SHM_FREE = 1 << 30
"""Free bytes a tmpfs needs before workspaces go there (a container's default /dev/shm is 64 MiB: never)."""


def _is_tmpfs(path: Path) -> bool:
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[1:3] == [str(path), "tmpfs"] for line in mounts if len(line.split()) >= 3)


def workspace_parent() -> Path | None:
    """Where new workspaces are made: `$GAGAR_WORKSPACES` when set; else, unless `$TMPDIR` is set,
    /dev/shm when it is a tmpfs with at least `MIN_SHM_FREE` free; else None (the system's temporary
    directory).

    A workspace holds only the objects of its patches and, while it builds, index files; on a disk-backed
    /tmp each of its ~60 files and directories is a journaled operation, which cost a build about a fifth of
    its CPU and two thirds of its wall time here (bench/README.md).

    Returns:
        The directory, or None for `tempfile`'s default.
    """
    if chosen := os.environ.get(ENV_WORKSPACES):
        return Path(chosen)
    if os.environ.get("TMPDIR") or not _is_tmpfs(SHM):
        return None
    try:
        stats = os.statvfs(SHM)
    except OSError:
        return None
    return SHM if stats.f_bavail * stats.f_frsize >= MIN_SHM_FREE and os.access(SHM, os.W_OK) else None


class BaseMemo:
    """Per-process memo of a base commit's resolution (commit and tree ids) and of its index file.

    Only full commit ids are remembered: a branch name or a short id can name another commit after a fetch.
    Thread-safe; the index memo is bounded by `max_index_bytes` (least recently used out first).
    """

    def __init__(self, max_index_bytes: int = INDEX_MEMO_BYTES) -> None:
        self.max_index_bytes = max_index_bytes
        self._ids: dict[tuple[Path, str], tuple[str, str]] = {}
        self._indexes: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def resolve(self, git_dir: Path, mirror: Path, name: str) -> tuple[str, str]:
        """The commit id and tree id `name` names, read in `git_dir` (which borrows from `mirror`).

        Args:
            git_dir: the workspace repository.
            mirror: its mirror, part of the memo's key.
            name: what the task calls the base commit.

        Returns:
            (commit id, tree id).

        Raises:
            GitError: when git cannot resolve the name.
            ValueError: when git answers with something other than two ids.
        """
        key = (mirror, name)
        with self._lock:
            known = self._ids.get(key)
        if known is not None:
            return known
        commit, tree = out(["rev-parse", f"{name}^{{commit}}", f"{name}^{{tree}}"], git_dir=git_dir).split()
        if FULL_ID.fullmatch(name) and commit == name:
            with self._lock:
                self._ids[key] = (commit, tree)
        return commit, tree

    def write_index(self, git_dir: Path, tree: str, index: Path) -> None:
        """Write the index of `tree` (what `git read-tree TREE` makes) to `index`, from memory when known.

        Args:
            git_dir: a repository that has the tree.
            tree: the full tree id.
            index: where to write the index file.

        Raises:
            GitError: when git cannot read the tree.
        """
        with self._lock:
            data = self._indexes.get(tree)
            if data is not None:
                self._indexes.move_to_end(tree)
        if data is not None:
            index.write_bytes(data)
            return
        git(["read-tree", tree], git_dir=git_dir, env={"GIT_INDEX_FILE": str(index)})
        data = index.read_bytes()
        with self._lock:
            self._indexes[tree] = data
            while sum(len(d) for d in self._indexes.values()) > self.max_index_bytes and self._indexes:
                self._indexes.popitem(last=False)


base_memo = BaseMemo()
"""The process's memo; every workspace shares it."""


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _apply_pool() -> ThreadPoolExecutor:
    """The threads every build applies patches on (their work is git processes: a few per core suffice)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=4 * (os.cpu_count() or 1), thread_name_prefix="gagar-apply"
            )
        return _pool


def _forget_pool() -> None:
    # A forked child has none of the parent's threads, but the executor would count them: it starts its own.
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


def map_on_pool(fn: Callable[[T], R], items: list[T], limit: int) -> list[R]:
    """`fn` over `items` on the process's apply threads (started once, not per build), at most `limit` at a
    time.

    Args:
        fn: what to run on each item.
        items: the items.
        limit: most items in flight at once for this call (other calls share the threads).

    Returns:
        The results, in the order of `items`.

    Raises:
        Exception: whatever `fn` raised, for the first item whose call raised.
    """
    results: dict[int, R] = {}
    pending: dict[Future[R], int] = {}
    queue = list(enumerate(items))
    while queue or pending:
        while queue and len(pending) < limit:
            index, item = queue.pop(0)
            pending[_apply_pool().submit(fn, item)] = index
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        for future in done:
            results[pending.pop(future)] = future.result()
    return [results[i] for i in range(len(items))]


class Remover:
    """Removes directories on one background thread, so that a grading slot does not wait on the disk.

    `remove` first renames the directory to a hidden sibling, so it is gone from its path at once; the
    thread then deletes the tree. At interpreter exit whatever is queued is removed before exit.
    """

    def __init__(self, rmtree: Callable[[Path], None] | None = None) -> None:
        self._rmtree = rmtree or (lambda path: shutil.rmtree(path, ignore_errors=True))
        self._reset()
        # A forked child (multiprocessing) has no remover thread, and may have copied the queue's lock while
        # the thread held it: it starts afresh, and the parent's queue stays the parent's.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._queue: queue.Queue[Path | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def remove(self, path: Path) -> None:
        """Make `path` disappear now and delete its content in the background.

        Args:
            path: a directory (a missing one is ignored).
        """
        trash = path.with_name(f".{path.name}.removing")
        try:
            os.rename(path, trash)
        except FileNotFoundError:
            return
        except OSError:  # cannot rename (another device, a busy name): remove it here instead
            self._rmtree(path)
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="gagar-remover", daemon=True)
                self._thread.start()
        self._queue.put(trash)

    def drain(self) -> None:
        """Wait until everything queued so far is removed."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            path = self._queue.get()
            try:
                if path is not None:
                    self._rmtree(path)
            finally:
                self._queue.task_done()


remover = Remover()
atexit.register(remover.drain)
