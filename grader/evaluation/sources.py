"""Where `gagar bench prepare` finds a recipe's sources and how it reads them: local git copies of
OWNER/NAME (`--source-root`, `--source`), or bare clones of https://github.com/OWNER/NAME made into the cache
when online, read at pinned commits with `git cat-file`.

A repository name from a recipe becomes two path segments and a clone URL: it is checked
(`grader.util.untrusted.repository_name`) before either; commits and paths reach git after `--end-of-options`;
a clone is written only inside its root. Split from grader.evaluation.prepare, which re-exports every name.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from grader.errors import GitError, InputFileError
from grader.util.cachedirs import data_cache
from grader.util.untrusted import UnsafeValue, contained, repository_name
from grader.workspace import sources
from grader.workspace.gitcmd import git, git_stream
from grader.workspace.gitcmd import out as git_out

MAX_SOURCE_BYTES = 64 * 2**20
"""The most a pointed-at file may hold when the recipe declares no size (swebench-lite's largest: 1.5 MB)."""
READ_CHUNK = 2**20


def prepared_root() -> Path:
    """Where prepared benchmarks live: `benchmarks` in the data cache (`grader.util.cachedirs`:
    `$GAGAR_CACHE`, else `~/.cache/gagar`), beside the mirrors."""
    return data_cache() / "benchmarks"


def _owned(path: Path, root: Path | None = None) -> Path:
    """`path`, proven inside `root` (the prepared root by default) before prepare writes or deletes it.

    Raises:
        OutsidePath: it resolves outside (a name of `..`, a folder replaced by a symbolic link).
    """
    return contained(prepared_root() if root is None else root, path)


def github_url(repository: str) -> str:
    """https://github.com/OWNER/NAME."""
    return f"https://github.com/{repository}"


# -- finding sources --------------------------------------------------------------------------------------


def _is_git_dir(path: Path) -> bool:
    return path.is_dir() and git(["rev-parse", "--git-dir"], cwd=path, check=False).returncode == 0


def candidate_paths(repository: str, root: Path) -> list[Path]:
    """Where a source root may hold OWNER/NAME (`grader.workspace.sources`: OWNER/NAME documented,
    OWNER__NAME, OWNER+NAME and their .git forms accepted)."""
    return sources.candidate_paths(repository, root)


@dataclass
class SourceLocator:
    """Finds the local git copy of each OWNER/NAME; clones it into the cache when `online`."""

    roots: list[Path] = field(default_factory=list)
    given: dict[str, Path] = field(default_factory=dict)
    online: bool = False
    clone_root: Path = field(default_factory=lambda: prepared_root() / "sources")

    def __post_init__(self) -> None:
        self.roots = [Path(root) for root in self.roots]
        try:
            for repository in self.given:
                repository_name(repository, f"--source {repository}=...")
        except UnsafeValue as exc:
            raise InputFileError(str(exc)) from None
        self.given = {repository: Path(path) for repository, path in self.given.items()}

    def find(self, repository: str) -> Path | None:
        """The git directory (or work tree) of `repository`, or None when none is here.

        Raises:
            InputFileError: a path given with --source is not a git repository.
            UnsafeValue: `repository` is not OWNER/NAME (it becomes two path segments).
        """
        repository_name(repository, "repository")
        if repository in self.given:
            path = self.given[repository]
            if not _is_git_dir(path):
                raise InputFileError(f"--source {repository}={path}: not a git repository")
            return path
        for root in [*self.roots, self.clone_root]:
            for path in candidate_paths(repository, root):
                if _is_git_dir(path) and path.resolve() != root.resolve():
                    return path
        return None

    def locate(self, repository: str) -> Path | None:
        """`find`, else (online) a bare clone of https://github.com/OWNER/NAME into the cache, else None."""
        found = self.find(repository)
        if found is not None or not self.online:
            return found
        target = self.clone_root / repository.split("/")[0] / f"{repository.split('/')[1]}.git"
        target = _owned(target, self.clone_root)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = _owned(target.with_name(target.name + f".tmp{os.getpid()}"), self.clone_root)
        try:
            git(["clone", "--bare", "--quiet", "--", github_url(repository), str(tmp)])
        except GitError:
            shutil.rmtree(tmp, ignore_errors=True)
            return None
        tmp.rename(target)
        return target


def fix_command(repository: str, name: str) -> str:
    """The command that brings a missing source here."""
    return (
        f"git clone --bare https://github.com/{repository} SOURCES/{repository}.git "
        f"&& gagar bench prepare {name} --source-root SOURCES"
    )


def read_at(path: Path, commit: str, file: str) -> bytes:
    """The bytes of `file` at `commit` in the git copy at `path` (read whole: for files known to be small).

    Raises:
        GitError: the commit or the file is not there.
    """
    return git(["cat-file", "blob", "--end-of-options", f"{commit}:{file}"], cwd=path).stdout


def read_hashed(path: Path, commit: str, file: str, limit: int) -> tuple[str, tempfile.SpooledTemporaryFile]:
    """Stream `file` at `commit` from the git copy at `path`, hashing it in chunks.

    The size is asked first, so a file over `limit` is not read at all; the bytes go to a spooled temporary
    file (in memory up to a few MB, on disk beyond), so a file whose sha256 turns out wrong never sits
    whole in memory.

    Args:
        path: the git copy (work tree or git directory).
        commit: the pinned commit (checked: 40 hex digits).
        file: the path at that commit (checked: relative, no `..`).
        limit: the most bytes the file may hold.

    Returns:
        (sha256 hex of the bytes, the bytes in a temporary file positioned at its start; the caller closes
        it).

    Raises:
        GitError: the commit or the file is not there, or git fails while reading.
        ValueError: the file holds more than `limit` bytes (the message gives both sizes).
    """
    spec = f"{commit}:{file}"
    size = int(git_out(["cat-file", "-s", "--end-of-options", spec], cwd=path))
    if size > limit:
        raise ValueError(f"holds {size} bytes, over the {limit} it may hold: not read")
    digest = hashlib.sha256()
    spool = tempfile.SpooledTemporaryFile(max_size=8 * READ_CHUNK)  # noqa: SIM115 - the caller closes it
    try:
        with git_stream(["cat-file", "blob", "--end-of-options", spec], cwd=path) as proc:
            assert proc.stdout is not None
            read = 0
            while chunk := proc.stdout.read(READ_CHUNK):
                read += len(chunk)
                if read > limit:  # the blob changed under us: never hold more than was allowed
                    raise ValueError(f"holds more than the {limit} bytes it may hold: not read")
                digest.update(chunk)
                spool.write(chunk)
            returncode = proc.wait()
            stderr = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
        if returncode != 0:
            raise GitError(["cat-file", "blob", spec], returncode, stderr)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return digest.hexdigest(), spool
