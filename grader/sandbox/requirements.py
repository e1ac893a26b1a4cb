"""Requirement lines an offline layer build cannot honour, and requirements files rewritten without them.

An environment layer installs from PyPI (through the machine's mirror) only. A requirements file that names a
VCS URL (`git+https://github.com/sphinx-doc/sphinx.git@...`), a direct URL on another host, or another index
would fail the whole layer on that one line. `honour` rewrites the staged copy of such a file (and the files
it includes with -r/-c) without those lines and returns them, so the layer is built from what remains and
the caller can list what was left out (`EnvironmentImage.unhonoured`).

A line that installs a local path editable (`-e .`, pylint 2.15's requirements_test.txt) is kept as a plain
install of that path: the tree is installed for its dependencies only (each command runs in its own copy of
the tree), and a backend without PEP 660's editable hook (setuptools before 64) fails `-e` outright.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlparse

PYPI_HOSTS = frozenset({"pypi.org", "files.pythonhosted.org", "pypi.python.org"})
VCS = re.compile(r"^(?:-e\s+|--editable[=\s]+)?(?:[\w.\[\],-]+\s*@\s*)?(git|hg|svn|bzr)\+", re.IGNORECASE)
URL = re.compile(r"(?:^|[\s@=])(https?|ftp|file)://\S+", re.IGNORECASE)
INDEX_OPTIONS = ("-i", "--index-url", "--extra-index-url", "-f", "--find-links", "--trusted-host")
INCLUDE_OPTIONS = ("-r", "--requirement", "-c", "--constraint")
# `-e PATH` / `--editable=PATH` of a local path (not a VCS or URL requirement, which `unhonourable` catches).
LOCAL_EDITABLE = re.compile(r"^(?:-e|--editable)(?:\s+|=)(?P<path>(?:\.|/|file:)\S*)\s*$")


def unhonourable(line: str) -> bool:
    """Whether a requirement (a line of a requirements file, or a pip argument) needs more than PyPI.

    Args:
        line: one requirement or option line, comments allowed.

    Returns:
        True for a VCS requirement, a URL on a host other than PyPI's, or an index or find-links option
        (any other index is unreachable offline; PyPI's own is the default already).
    """
    text = line.split(" #", 1)[0].strip()
    if not text or text.startswith("#"):
        return False
    if VCS.match(text):
        return True
    first = text.split(None, 1)[0].split("=", 1)[0]
    if first in INDEX_OPTIONS:
        return True
    for match in URL.finditer(text):
        host = urlparse(match.group(0).lstrip(" @=")).hostname or ""
        if host not in PYPI_HOSTS:
            return True
    return False


def honour(path: Path, root: Path) -> list[str]:
    """Rewrite the requirements file `path` (and each file it includes, inside `root`) without the lines an
    offline build cannot honour, and with local editable installs made plain (see the module docstring).

    Args:
        path: a staged requirements file (it is rewritten in place: pass a copy).
        root: the staged tree; includes outside it are left alone.

    Returns:
        The lines left out, each as "FILE:LINE: text" with FILE relative to `root`, in file order.
    """
    left_out: list[str] = []
    seen: set[Path] = set()

    def visit(file: Path) -> None:
        resolved = file.resolve()
        if resolved in seen or not resolved.is_file() or root.resolve() not in resolved.parents:
            return
        seen.add(resolved)
        kept = []
        lines = resolved.read_text(encoding="utf-8", errors="replace").splitlines()
        for number, line in enumerate(lines, start=1):
            if unhonourable(line):
                left_out.append(f"{resolved.relative_to(root.resolve()).as_posix()}:{number}: {line.strip()}")
                kept.append(f"# left out by gagar (needs more than PyPI): {line.strip()}")
                continue
            editable = LOCAL_EDITABLE.match(line.split(" #", 1)[0].strip())
            if editable:
                kept.append(f"# installed plainly by gagar, not editable: {line.strip()}")
                kept.append(editable.group("path"))
                continue
            kept.append(line)
            for include in _includes(line):
                visit(resolved.parent / include)
        resolved.write_text("\n".join(kept) + "\n", encoding="utf-8")

    visit(path)
    return left_out


def _includes(line: str) -> list[str]:
    """The files a requirements line includes (-r/-c, --requirement/--constraint, with or without "=")."""
    try:
        words = shlex.split(line.split(" #", 1)[0])
    except ValueError:
        return []
    found = []
    for i, word in enumerate(words):
        if word in INCLUDE_OPTIONS and i + 1 < len(words):
            found.append(words[i + 1])
        elif word.startswith(("--requirement=", "--constraint=")):
            found.append(word.split("=", 1)[1])
        elif word[:2] in ("-r", "-c") and len(word) > 2:
            found.append(word[2:])
    return found


def included_files(read: Callable[[str], bytes | None], names: Iterable[str]) -> set[str]:
    """The requirements files `names` and every file they include, as `honour` would visit them, by their
    paths relative to the tree's root.

    Args:
        read: a file's bytes by its path relative to the root, or None when the tree has no such file.
        names: the requirements files to start from.

    Returns:
        Every such path that is in the tree (includes leaving the root are left out, as `honour` does).
    """
    found: set[str] = set()
    pending = [posixpath.normpath(name) for name in names]
    while pending:
        name = pending.pop()
        if name in found or name.startswith(("../", "/")) or name == "..":
            continue
        data = read(name)
        if data is None:
            continue
        found.add(name)
        for line in data.decode("utf-8", "replace").splitlines():
            if not unhonourable(line):
                folder = posixpath.dirname(name)
                pending += [posixpath.normpath(posixpath.join(folder, i)) for i in _includes(line)]
    return found
