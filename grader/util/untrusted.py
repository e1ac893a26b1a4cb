"""Checks for values gagar did not write, before they reach a command line or a path.

A recipe, a dataset row, a group file or a SWE-bench file is text anyone may have written. Its values end up
as git arguments (a commit, a `commit:path`, a repository's clone URL) and as parts of paths in the cache (a
recipe's name, a repository's OWNER/NAME). A commit of `--upload-pack=CMD` is an option to `git fetch`, which
then runs CMD; a name of `../../x` writes outside the cache. Every such value goes through one of these
checks first, and every path written or deleted from such a value through `contained` (docs/security.md
lists the checks and where each is made).

Each check returns the value unchanged when it is safe, and raises `UnsafeValue` naming where the value came
from (`where`: the file, the line, the field), the value and what was expected.
"""

from __future__ import annotations

import re
from pathlib import Path

from grader.errors import GagarError

COMMIT = re.compile(r"[0-9a-f]{40}")
"""A full commit id (SHA-1), as git prints it."""
SHA256 = re.compile(r"[0-9a-f]{64}")
OWNER = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})")
"""A GitHub owner: letters, digits and `-`, not first; at most 39."""
NAME = re.compile(r"[A-Za-z0-9._-]{1,100}")
"""A GitHub repository name: letters, digits and `._-`, at most 100 (`.` and `..` refused apart)."""
SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
"""One path segment gagar names a folder by: starts with a letter, digit or `_`; at most 100."""
REVISION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,254}")
"""A revision a group file may name: a commit id (full or short), a branch or a tag; no revision syntax."""
URL_SCHEMES = frozenset({"https", "http", "ssh", "git", "file"})
"""The transports a group file's repository URL may use (git's own, never a remote helper)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class UnsafeValue(GagarError, ValueError):
    """A value from a file gagar did not write that may not reach a command line or a path as it is; the
    message names the file and field it came from, the value and what was expected."""


class OutsidePath(GagarError, ValueError):
    """A path gagar was about to write or delete that resolves outside the folder it must stay in; the
    message names both."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _refusal(where: str, value: object, expected: str) -> str:
    return f"{where}: {_shown(value)} is refused: expected {expected}"


def commit_id(value: object, where: str) -> str:
    """A full commit id: 40 lowercase hex digits.

    Args:
        value: the value as read.
        where: the file and field it was read from, for the error.

    Returns:
        `value`.

    Raises:
        UnsafeValue: anything else (a short id, a branch, an option such as `--upload-pack=...`).
    """
    if not isinstance(value, str) or COMMIT.fullmatch(value) is None:
        raise UnsafeValue(_refusal(where, value, "a commit id of 40 hex digits"))
    return value


def sha256_hex(value: object, where: str) -> str:
    """A sha256 digest: 64 lowercase hex digits.

    Raises:
        UnsafeValue: anything else (named with `where`).
    """
    if not isinstance(value, str) or SHA256.fullmatch(value) is None:
        raise UnsafeValue(_refusal(where, value, "a sha256 of 64 hex digits"))
    return value


def repository_name(value: object, where: str) -> str:
    """A GitHub repository as OWNER/NAME, in the characters GitHub allows, neither part `.` or `..`.

    It becomes a clone URL (`https://github.com/OWNER/NAME`) and two path segments under a source root.

    Args:
        value: the value as read.
        where: the file and field it was read from, for the error.

    Returns:
        `value`.

    Raises:
        UnsafeValue: anything else (`../x`, `a/b/c`, `-x/y`, a URL).
    """
    if isinstance(value, str) and value.count("/") == 1:
        owner, name = value.split("/")
        if OWNER.fullmatch(owner) and NAME.fullmatch(name) and name not in (".", ".."):
            return value
    raise UnsafeValue(
        _refusal(where, value, "OWNER/NAME (letters, digits, '-' in OWNER; letters, digits, '._-' in NAME)")
    )


def path_segment(value: object, where: str) -> str:
    """A name that becomes one folder: letters, digits and `._-`, not starting with `.` or `-`, at most 100.

    Raises:
        UnsafeValue: anything else (`/abs/dir`, `..`, `a/b`, an empty name), named with `where`.
    """
    if not isinstance(value, str) or SEGMENT.fullmatch(value) is None:
        raise UnsafeValue(
            _refusal(where, value, "one path segment of letters, digits, '._-' (not starting with '.', '-')")
        )
    return value


def relative_path(value: object, where: str) -> str:
    """A path inside a repository: relative, without a `..` segment, not starting with `-`, no control
    character; at most 4096 characters.

    Raises:
        UnsafeValue: anything else (named with `where`).
    """
    if (
        not isinstance(value, str)
        or not value
        or len(value) > 4096
        or value.startswith(("/", "-"))
        or _CONTROL.search(value)
        or ".." in value.split("/")
        or "\\" in value
    ):
        raise UnsafeValue(
            _refusal(where, value, "a relative path without '..', not starting with '-' or '/'")
        )
    return value


def revision(value: object, where: str) -> str:
    """What a group file may name as its base commit: a commit id, a branch or a tag (letters, digits and
    `._/-`, starting with a letter, digit or `_`, no `..`); at most 255 characters.

    Raises:
        UnsafeValue: anything else (an option, revision syntax such as `HEAD~1` or `a..b`), named.
    """
    if not isinstance(value, str) or REVISION.fullmatch(value) is None or ".." in value:
        raise UnsafeValue(
            _refusal(where, value, "a commit id, branch or tag (letters, digits, '._/-'; not first '-')")
        )
    return value


def repository_location(value: object, where: str) -> str:
    """What a group file may name as its repository: a local path or bundle, a URL of git's own transports
    (`https`, `http`, `ssh`, `git`, `file`) or `git@host:path`; never an option, a remote helper
    (`ext::...`, `fd::...`) or a control character.

    Raises:
        UnsafeValue: anything else, named with `where`.
    """
    if not isinstance(value, str) or not value or value.startswith("-") or _CONTROL.search(value):
        raise UnsafeValue(_refusal(where, value, "a path or URL of a git repository, not starting with '-'"))
    scheme, sep, _ = value.partition("://")
    if sep and scheme.lower() not in URL_SCHEMES:
        raise UnsafeValue(_refusal(where, value, f"a URL of {', '.join(sorted(URL_SCHEMES))}"))
    if not sep and "::" in value:
        raise UnsafeValue(
            _refusal(where, value, "a path or URL (a remote helper `TRANSPORT::ADDRESS` is not one)")
        )
    return value


def contained(root: Path | str, path: Path | str) -> Path:
    """`path`, once proven to resolve inside `root` (symbolic links followed, `..` resolved): gagar writes or
    deletes it only then.

    Args:
        root: the folder `path` must stay in (it need not exist yet).
        path: the path about to be written or deleted (it need not exist yet).

    Returns:
        `path` resolved.

    Raises:
        OutsidePath: `path` resolves outside `root`, or is `root` itself.
    """
    base = Path(root).resolve()
    resolved = Path(path).resolve()
    if resolved == base or not resolved.is_relative_to(base):
        raise OutsidePath(f"{path} resolves to {resolved}, outside {base}: refused to write or delete it")
    return resolved
