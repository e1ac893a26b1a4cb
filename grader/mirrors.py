"""A cache of bare mirrors of task repositories, shared by every workspace built on this machine.

Workspaces borrow objects from a mirror through git alternates, so a group costs its patches, never a clone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from grader.filelock import file_lock
from grader.gitcmd import GitError, git

ENV_CACHE_DIR = "GAGAR_CACHE"


def default_cache_dir() -> Path:
    """`$GAGAR_CACHE/mirrors`, else `$XDG_CACHE_HOME/gagar/mirrors`, else `~/.cache/gagar/mirrors`."""
    if root := os.environ.get(ENV_CACHE_DIR):
        return Path(root) / "mirrors"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gagar" / "mirrors"


def _is_url(repo: str) -> bool:
    return "://" in repo or repo.startswith("git@")


class MirrorCache:
    """Bare mirrors keyed by repository location; safe to share between processes (file locks)."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self._known: set[tuple[Path, str]] = set()  # (mirror, commit) pairs already checked in this process

    def path_for(self, repo: str) -> Path:
        location = repo if _is_url(repo) else str(Path(repo).resolve())
        name = Path(location.rstrip("/")).name.removesuffix(".git").removesuffix(".bundle") or "repo"
        digest = hashlib.sha256(location.encode()).hexdigest()[:16]
        return self.root / f"{name}-{digest}.git"

    def lookup(self, repo: str, commit: str) -> bool | None:
        """Whether `commit` is in the mirror of `repo` already on this machine, without cloning or fetching.

        Args:
            repo: The repository's location (URL or local path), as in `Task.repo`.
            commit: The commit to look up.

        Returns:
            True or False from the mirror, or None when `repo` has no mirror yet (nothing was checked).
        """
        path = self.path_for(repo)
        if (path, commit) in self._known:
            return True
        if not path.exists():
            return None
        if not has_commit(path, commit):
            return False
        self._known.add((path, commit))
        return True

    def mirror(self, repo: str, commit: str) -> Path:
        """Return a mirror of `repo` that contains `commit`, cloning or fetching as needed.

        Raises FileNotFoundError for a local repository that does not exist, GitError when cloning or fetching
        fails, and LookupError when the commit is not in the repository even after a fetch.
        """
        if not _is_url(repo) and not Path(repo).exists():
            raise FileNotFoundError(f"repository {repo!r} does not exist")
        path = self.path_for(repo)
        if (path, commit) in self._known:  # objects are never removed from a mirror: once there, always there
            return path
        with file_lock(path.with_suffix(".lock")):
            if not path.exists():
                tmp = path.with_name(path.name + f".tmp{os.getpid()}")
                shutil.rmtree(tmp, ignore_errors=True)
                try:
                    git(["clone", "--mirror", "--quiet", repo, str(tmp)])
                except GitError:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
                tmp.rename(path)
            if not has_commit(path, commit):
                git(["fetch", "--quiet", "--prune", "origin", "+refs/*:refs/*"], git_dir=path, check=False)
            if not has_commit(path, commit):
                raise LookupError(f"base commit {commit!r} is not in repository {repo!r}")
        self._known.add((path, commit))
        return path


def has_commit(git_dir: Path, commit: str) -> bool:
    """Whether `commit` names a commit in the repository at `git_dir`."""
    return git(["cat-file", "-e", f"{commit}^{{commit}}"], git_dir=git_dir, check=False).returncode == 0


_shared: dict[Path, MirrorCache] = {}


def shared_cache() -> MirrorCache:
    """The process-wide cache for the default location (so its memo of known commits is shared)."""
    root = default_cache_dir()
    if root not in _shared:
        _shared[root] = MirrorCache(root)
    return _shared[root]
