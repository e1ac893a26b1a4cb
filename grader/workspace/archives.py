"""Trees as tars for a sandbox: a commit's whole tree, or how it differs from another commit's.

A candidate's tree differs from base's in a few files, yet `git archive` inflates every blob of it: for a
sympy group of 11 targets that is 11 times 33 MB and a quarter of a second of a core each. `changes` lists
what differs (`git diff-tree`) and archives only those files, so a sandbox holding base's tree can make a
candidate's from it (see `grader.sandbox.docker`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.workspace.gitcmd import git

# Past these a candidate rewrote much of the tree: its whole archive is as cheap, and no command line is long.
MAX_CHANGED_PATHS = 1000
MAX_CHANGED_PATH_BYTES = 64 * 1024


@dataclass(frozen=True)
class TreeChanges:
    """How one tree differs from another (its `base`): remove every path of `paths` from a copy of the base
    tree, together with what is under it, then add the files of `archive`: the result is the tree."""

    paths: tuple[str, ...]
    """Every file path that was removed, added, or changed in content, mode or type (git's paths, relative
    to the root, never absolute and never with a `..` part)."""
    archive: bytes
    """An uncompressed tar, as `git archive` makes it, of the files of the tree among `paths`."""


def archive(git_dir: Path | str, commit: str) -> bytes:
    """The tree of `commit` as an uncompressed tar (`git archive`).

    Raises:
        GitError: git could not archive it (an unknown commit).
    """
    return git(["archive", "--format=tar", commit], git_dir=git_dir).stdout


def changes(git_dir: Path | str, base: str, commit: str) -> TreeChanges | None:
    """How the tree of `commit` differs from that of `base`, or None when it differs so much (more than
    `MAX_CHANGED_PATHS` paths or `MAX_CHANGED_PATH_BYTES` of them) that its whole `archive` is the better way.

    Raises:
        GitError: git could not compare or archive them (an unknown commit).
    """
    listing = git(["diff-tree", "-r", "-z", "--no-renames", "--name-status", base, commit], git_dir=git_dir)
    fields = listing.stdout.split(b"\0")
    statuses, names = fields[0:-1:2], fields[1::2]
    if len(names) > MAX_CHANGED_PATHS or sum(len(n) + 1 for n in names) > MAX_CHANGED_PATH_BYTES:
        return None
    paths = tuple(os_path(name) for name in names)
    present = [path for status, path in zip(statuses, paths, strict=True) if status != b"D"]
    if not present:
        return TreeChanges(paths, _empty_tar())
    # Literal pathspecs: a file named `*.py` means that file, not every Python file.
    files = git(
        ["archive", "--format=tar", commit, "--", *present],
        git_dir=git_dir,
        env={"GIT_LITERAL_PATHSPECS": "1"},
    )
    return TreeChanges(paths, files.stdout)


def os_path(name: bytes) -> str:
    """A git path as `tarfile` names it: decoded with surrogate escapes, so any bytes survive."""
    return name.decode("utf-8", "surrogateescape")


def _empty_tar() -> bytes:
    return b"\0" * 10240
