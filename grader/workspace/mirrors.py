"""A cache of bare mirrors of task repositories, shared by every workspace built on this machine.

Workspaces borrow objects from a mirror through git alternates, so a group costs its patches, never a clone.

A repository and a base commit come from group files and trainer rows: the repository goes after `--` and the
commit after `--end-of-options`, so neither is ever read as an option (a "commit" of `--upload-pack=CMD` is
looked up as a name and not found). The workspace resolves a base commit only after `mirror` found it here.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from grader.util.cachedirs import data_cache
from grader.util.filelock import file_lock
from grader.workspace.gitcmd import GitError, git


def default_cache_dir() -> Path:
    """`$GAGAR_CACHE/mirrors`, else `$XDG_CACHE_HOME/gagar/mirrors`, else `~/.cache/gagar/mirrors`."""
    return data_cache() / "mirrors"


def is_url(repo: str) -> bool:
    """Whether `repo` (as in `Task.repo`) is a remote URL rather than a local path or bundle."""
    return "://" in repo or repo.startswith("git@")


class MirrorCache:
    """Bare mirrors keyed by repository location; safe to share between processes (file locks)."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_cache_dir()
        self._known: set[tuple[Path, str]] = set()  # (mirror, commit) pairs already checked in this process

    def path_for(self, repo: str) -> Path:
        location = repo if is_url(repo) else str(Path(repo).resolve())
        name = Path(location.rstrip("/")).name.removesuffix(".git").removesuffix(".bundle") or "repo"
        digest = hashlib.sha256(location.encode()).hexdigest()[:16]
        return self.root / f"{name}-{digest}.git"

    def local_has_commit(self, repo: str, commit: str) -> bool:
        """Whether the local repository `repo` has `commit`, asked of the repository itself (no network).

        A directory is asked in place (`git cat-file`, no clone), so the answer depends on no mirror;
        a bundle, which git cannot read in place, through its mirror (cloned or fetched from the bundle).

        Args:
            repo: A local path to a repository (bare or not) or to a bundle file, as in `Task.repo`.
            commit: The commit to look for.

        Returns:
            True when the repository has the commit, False when it does not.

        Raises:
            ValueError: `repo` is a URL.
            FileNotFoundError: `repo` does not exist.
            GitError: `repo` is neither a git repository nor a bundle.
        """
        if is_url(repo):
            raise ValueError(f"{repo!r} is a URL, not a local repository")
        path = Path(repo)
        if not path.exists():
            raise FileNotFoundError(f"repository {repo!r} does not exist")
        if path.is_file():
            try:
                self.mirror(repo, commit)
            except LookupError:
                return False
            return True
        # Only `path` itself may be the repository: a folder inside another repository is not that one.
        ceiling = {"GIT_CEILING_DIRECTORIES": str(path.resolve().parent)}
        git(["rev-parse", "--git-dir"], cwd=path, env=ceiling)  # GitError: not a repository
        found = git(
            ["cat-file", "-e", "--end-of-options", f"{commit}^{{commit}}"], cwd=path, env=ceiling, check=False
        )
        return found.returncode == 0

    def mirror(self, repo: str, commit: str) -> Path:
        """Return a mirror of `repo` that contains `commit`, cloning or fetching as needed.

        Raises FileNotFoundError for a local repository that does not exist, GitError when cloning or fetching
        fails, and LookupError when the commit is not in the repository even after a fetch.
        """
        if not is_url(repo) and not Path(repo).exists():
            raise FileNotFoundError(f"repository {repo!r} does not exist")
        path = self.path_for(repo)
        if (path, commit) in self._known:  # objects are never removed from a mirror: once there, always there
            return path
        with file_lock(path.with_suffix(".lock")):
            if not path.exists():
                tmp = path.with_name(path.name + f".tmp{os.getpid()}")
                shutil.rmtree(tmp, ignore_errors=True)
                try:
                    git(["clone", "--mirror", "--quiet", "--", repo, str(tmp)])
                except GitError:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
                tmp.rename(path)
            if not has_commit(path, commit):
                git(["fetch", "--quiet", "--prune", "origin", "+refs/*:refs/*"], git_dir=path, check=False)
            if not has_commit(path, commit):
                raise LookupError(base_missing_reason(repo, commit))
        self._known.add((path, commit))
        return path


def base_missing_reason(repo: str, commit: str) -> str:
    """How a missing base commit is worded, the same wherever it is found missing."""
    return f"base commit {commit!r} is not in repository {repo!r}"


def has_commit(git_dir: Path, commit: str) -> bool:
    """Whether `commit` names a commit in the repository at `git_dir` (a value that looks like an option is
    looked up as a name, never read as one)."""
    found = git(["cat-file", "-e", "--end-of-options", f"{commit}^{{commit}}"], git_dir=git_dir, check=False)
    return found.returncode == 0


_shared: dict[Path, MirrorCache] = {}


def shared_cache() -> MirrorCache:
    """The process-wide cache for the default location (so its memo of known commits is shared)."""
    root = default_cache_dir()
    if root not in _shared:
        _shared[root] = MirrorCache(root)
    return _shared[root]
