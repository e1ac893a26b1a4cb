"""Source roots: one folder of local git copies of upstream repositories, one layout for every command.

`gagar bench prepare --source-root DIR` and `gagar import swebench --repo-root DIR` both read `DIR/OWNER/NAME`
(the documented layout, as `git clone https://github.com/OWNER/NAME DIR/OWNER/NAME` makes it) and accept the
other spellings found in the wild: `DIR/OWNER__NAME` (SWE-bench's), a `.git` suffix on either (a bare clone),
and `DIR/OWNER+NAME` (gagar's mirror cache). A root is checked when the command starts: a missing folder, or
one holding none of the repositories asked for, is an error that names the root, the layout and what it holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from grader.errors import InputFileError
from grader.util.untrusted import repository_name
from grader.workspace.gitcmd import git

LAYOUT = "DIR/OWNER/NAME"
"""The layout the help and the docs name (the others are accepted too)."""


def checked_repository(repository: str, where: str) -> tuple[str, str]:
    """(owner, name) of an `OWNER/NAME`, checked (`grader.util.untrusted.repository_name`), so it can be
    joined to a folder safely.

    Raises:
        UnsafeValue: it is not `OWNER/NAME` (the message names `where` it came from).
    """
    owner, name = repository_name(repository, where).split("/")
    return owner, name


def candidate_paths(repository: str, root: Path) -> list[Path]:
    """Where `root` may hold `repository` (OWNER/NAME), the documented layout first.

    Raises:
        UnsafeValue: `repository` is not `OWNER/NAME`.
    """
    owner, name = checked_repository(repository, f"source root {root}")
    underscored = root / f"{owner}__{name}"
    flat = root / f"{owner}+{name}"
    return [
        root / owner / name,
        root / owner / f"{name}.git",
        underscored,
        root / f"{owner}__{name}.git",
        flat,
        flat / "repo",
        root / f"{owner}+{name}.git",
    ]


def is_git_dir(path: Path) -> bool:
    """Whether `path` is a git repository of its own (the top of a work tree, or a bare repository), not a
    folder inside another one."""
    if not path.is_dir():
        return False
    proc = git(["rev-parse", "--is-bare-repository", "--absolute-git-dir"], cwd=path, check=False)
    if proc.returncode != 0:
        return False
    bare, git_dir = proc.stdout.decode("utf-8", "replace").split("\n")[:2]
    if bare == "true":
        return Path(git_dir).resolve() == path.resolve()
    top = git(["rev-parse", "--show-toplevel"], cwd=path, check=False)
    if top.returncode != 0:
        return False
    return Path(top.stdout.decode("utf-8", "replace").strip()).resolve() == path.resolve()


def find_in_root(repository: str, root: Path) -> Path | None:
    """The git copy of `repository` in `root` in any accepted layout, or None."""
    for path in candidate_paths(repository, root):
        if is_git_dir(path):
            return path
    return None


def check_source_root(root: Path, repositories: Iterable[str], option: str) -> dict[str, Path]:
    """Check a source root given on the command line, when the command starts.

    Args:
        root: the folder given.
        repositories: the OWNER/NAME repositories the command needs.
        option: the option that gave it (`--source-root`), for the message.

    Returns:
        Repository -> its git copy in `root`, for those found.

    Raises:
        InputFileError: `root` is not a folder, or holds none of `repositories` in any accepted layout (the
            message names the layout expected and a few of the entries found instead).
    """
    wanted = sorted(set(repositories))
    if not root.is_dir():
        raise InputFileError(f"{option} {root}: no such folder")
    found = {r: p for r in wanted if (p := find_in_root(r, root)) is not None}
    if wanted and not found:
        entries = sorted(entry.name for entry in root.iterdir())
        shown = ", ".join(entries[:8]) + (", ..." if len(entries) > 8 else "") if entries else "nothing"
        raise InputFileError(
            f"{option} {root}: holds none of the {len(wanted)} repositories needed ({', '.join(wanted[:4])}"
            f"{', ...' if len(wanted) > 4 else ''}) as git copies laid out {LAYOUT} (or DIR/OWNER__NAME); "
            f"it holds: {shown}"
        )
    return found
