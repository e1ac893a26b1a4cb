"""Applying a patch in process, for the patches git would apply at the first place it tries.

Most patches a rollout produces are `git diff` output against the very base they are applied to: every hunk
sits exactly where its header says. For those, `git apply --cached` + `git write-tree` (two processes per
patch) compute nothing that a few lines of Python cannot: each hunk's old lines at git's first-tried position,
replaced by its new lines, and the touched trees rewritten. This module does that, following git's rules for
that first try (apply.c, `apply_one_fragment` / `find_pos`):

- a hunk is tried at its new position (`+N` of `@@ -M +N @@`, less one; 0 for N = 0) in the file as the
  earlier hunks left it;
- a hunk whose old position is 0 or 1 must match at the file's start, one without trailing context lines
  at its end (git tries only that position then);
- old lines match byte for byte, and never a line an earlier hunk wrote (git marks those, LINE_PATCHED);
  "\\ No newline at end of file" takes the newline off the line before it; an empty line in a hunk is an
  empty context line.

Whatever falls outside those rules is declined, with the reason, and the workspace hands the patch to git as
before: a hunk git would look for elsewhere (an offset, an overlap with an earlier hunk), renames and copies,
mode changes, binary patches, symlinks and submodules, quoted or unusual paths, a path touched twice, counts
that do not fit the body, text around the hunks, and whatever git itself refuses or reads differently across
versions (a hunk without a changed line, a short or space-less "\\" marker, a header with other scripts'
digits, a deletion with new lines, a line without its newline, a name git's path checks refuse), and base
trees git would rewrite differently (modes it no longer writes, unsorted or duplicate entries). A declined
patch costs one parse; an accepted one yields exactly the tree git makes (tests/workspace/test_exactapply.py
and
tests/workspace/test_applier_fuzz.py compare tree ids with git's on generated, mutated and hostile patches).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader.workspace import gitobjects
from grader.workspace.gitobjects import BaseFiles, Entry
from grader.workspace.hunks import split_lines

# ASCII digits only: `\d` and int() also take other scripts' digits, which git's isdigit() does not.
_HUNK = re.compile(r"@@ -([0-9]+)(?:,([0-9]+))? \+([0-9]+)(?:,([0-9]+))? @@")
_INDEX = re.compile(r"index [0-9a-f]{7,40}\.\.[0-9a-f]{7,40}(?: (100644|100755))?")
_MODE_LINE = re.compile(r"(new|deleted) file mode (100644|100755)")
_UNUSUAL = re.compile(r'[\x00-\x1f"\\\x7f]')
_NTFS_DOTGIT = re.compile(r"(?:\.git|git~1)[. ]*(?::.*)?", re.IGNORECASE | re.DOTALL)
"""git's is_ntfs_dotgit: ".git" or "git~1", then only dots and spaces, maybe an NTFS stream (":...")."""
_HFS_IGNORED = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")
"""The code points HFS+ drops from names (git's is_hfs_dotgit skips them when it looks for ".git")."""
_LARGEST_LINE_NUMBER = 2**31 - 2
"""git keeps a hunk's position in an int: larger numbers are read differently, so they are declined."""
_MIN_MARKER_BYTES = 13
"""The shortest "\\ ..." marker line (with its newline) every git takes: git 2.47 wants 12 bytes, and more
than 12 left in the patch when the marker ends a hunk; later versions want 12 bytes and 12 left."""
_CANONICAL_MODES = frozenset({"100644", "100755", "120000", "160000", "40000"})
"""The modes git writes in a tree it builds; its index makes any other (100664, 040000, ...) one of these."""


class Declined(Exception):
    """The patch is not one this module applies (the reason says why); git applies it instead."""


@dataclass
class _Hunk:
    old_start: int
    new_start: int
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    trailing: int = 0


@dataclass
class FileChange:
    """One file of a patch as git reads it: its path, what happens to it, and its hunks."""

    path: str
    action: str  # "modify", "add" or "delete"
    mode: str | None  # the mode a new file gets, or the one the header says the old file has
    hunks: list[_Hunk]


def _path_of(header: str) -> str:
    """P from "diff --git a/P b/P"; declined when the two names differ or need quoting."""
    rest = header[len("diff --git ") :]
    half = (len(rest) - 1) // 2
    path = rest[2:half]
    if rest != f"a/{path} b/{path}" or not path:
        raise Declined(f"header {header!r}: not the same plain path on both sides")
    parts = path.split("/")
    if _UNUSUAL.search(path) or any(_unusual_component(p) for p in parts):
        raise Declined(f"path {path!r}: unusual characters or components")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 (surrogateescape), or a lone surrogate
        raise Declined(f"path {path!r}: not UTF-8") from None
    return path


def _unusual_component(part: str) -> bool:
    """Whether a path component is one git refuses or reads differently: empty, "." or "..", one Windows
    would take for ".git" (git's core.protectNTFS is on everywhere: ".git.", "GIT~1", ".git::$DATA"), one
    holding a character macOS ignores in names (core.protectHFS, on there: ".g\u200cit"), or one with a
    space at either end (git's name parsing trims some)."""
    return (
        part in ("", ".", "..")
        or _NTFS_DOTGIT.fullmatch(part) is not None
        or _HFS_IGNORED.search(part) is not None
        or part != part.strip(" ")
    )


def _is_marker(line: str) -> bool:
    """Whether git (every version) reads `line` as a "\\ No newline at end of file" marker."""
    if not (line.startswith("\\ ") and line.endswith("\n")):
        return False
    try:
        return len(line.encode("utf-8", "surrogateescape")) >= _MIN_MARKER_BYTES
    except UnicodeEncodeError:
        return False


def _read_hunk(lines: list[str], at: int, header: re.Match[str]) -> tuple[_Hunk, int]:
    """Consume one hunk's body exactly as its counts say, as git's parser does."""
    numbers = [int(g) if g is not None else 1 for g in header.group(1, 2, 3, 4)]
    if max(numbers) > _LARGEST_LINE_NUMBER:
        raise Declined(f"hunk header {header.group(0)!r}: a number past what git holds")
    old_start, old_count, new_start, new_count = numbers
    hunk = _Hunk(old_start, new_start)
    kinds: list[str] = []
    while old_count or new_count:
        if at >= len(lines):
            raise Declined("a hunk ends before its counts are used up")
        line = lines[at]
        kind, text = (" ", "\n") if line == "\n" else (line[:1], line[1:])
        if kind == "\\":
            raise Declined("a no-newline marker that follows no line")
        if kind not in (" ", "-", "+") or (kind != "+" and not old_count) or (kind != "-" and not new_count):
            raise Declined(f"a hunk's line does not fit its counts: {line[:40]!r}")
        if kind != "+":
            hunk.old.append(text)
            old_count -= 1
        if kind != "-":
            hunk.new.append(text)
            new_count -= 1
        kinds.append(kind)
        at += 1
        if at < len(lines) and lines[at].startswith("\\"):
            # git versions differ on short markers and on one after an empty context line: declined.
            if not _is_marker(lines[at]) or line == "\n":
                raise Declined(f"a no-newline marker git may read otherwise: {lines[at][:40]!r}")
            if kind != "+":
                hunk.old[-1] = hunk.old[-1].removesuffix("\n")
            if kind != "-":
                hunk.new[-1] = hunk.new[-1].removesuffix("\n")
            at += 1
    if "+" not in kinds and "-" not in kinds:
        raise Declined(f"hunk {header.group(0)!r} changes no line (git: corrupt patch)")
    hunk.trailing = next((i for i, k in enumerate(reversed(kinds)) if k != " "), len(kinds))
    return hunk, at


def read_patch(patch: str) -> list[FileChange]:
    """The patch's files, when every one is a plain `diff --git` text change this module can apply.

    Args:
        patch: the patch text, as git would receive it.

    Returns:
        Its files in order.

    Raises:
        Declined: naming the first thing outside the supported forms.
    """
    if patch and not patch.endswith("\n"):
        raise Declined("the patch's last line has no newline (git: corrupt patch)")
    if "\0" in patch:
        raise Declined("a NUL character in the patch")
    lines = split_lines(patch)
    at = 0
    files: list[FileChange] = []
    while at < len(lines):
        if not lines[at].startswith("diff --git "):
            if files or lines[at].strip():
                raise Declined(f"text outside a file's diff: {lines[at][:40]!r}")
            at += 1  # blank lines before the first file
            continue
        path = _path_of(lines[at].rstrip("\n"))
        at += 1
        index_mode: str | None = None
        action, mode, minus, plus = "modify", None, None, None
        seen: set[str] = set()
        while at < len(lines) and not lines[at].startswith(("--- ", "@@", "diff --git ")):
            line = lines[at].rstrip("\n")
            m = _MODE_LINE.fullmatch(line) or _INDEX.fullmatch(line)
            kind = "index" if m is not None and m.re is _INDEX else "mode"
            if m is None or kind in seen:
                raise Declined(f"{path}: extended header {line[:40]!r}")
            seen.add(kind)
            if kind == "mode":
                action, mode = ("add" if m.group(1) == "new" else "delete"), m.group(2)
            elif m.group(1):
                index_mode = m.group(1)
            at += 1
        if index_mode and action != "modify":  # git reads it as the old file's mode
            raise Declined(f"{path}: a mode on the index line of a file created or deleted")
        if action == "modify":
            mode = index_mode
        if at < len(lines) and lines[at].startswith("--- "):
            minus = lines[at].rstrip("\n")[4:]
            has_plus = at + 1 < len(lines) and lines[at + 1].startswith("+++ ")
            plus = lines[at + 1].rstrip("\n")[4:] if has_plus else None
            at += 2
            expected = {
                "modify": (f"a/{path}", f"b/{path}"),
                "add": ("/dev/null", f"b/{path}"),
                "delete": (f"a/{path}", "/dev/null"),
            }[action]
            if (minus, plus) != expected:
                raise Declined(f"{path}: file names {minus!r} / {plus!r} do not match the header")
        hunks: list[_Hunk] = []
        while at < len(lines) and lines[at].startswith("@@"):
            if minus is None:
                raise Declined(f"{path}: hunks without file names")
            header = _HUNK.match(lines[at])
            if header is None:
                raise Declined(f"{path}: hunk header {lines[at][:40]!r}")
            hunk, at = _read_hunk(lines, at + 1, header)
            hunks.append(hunk)
        if action == "modify" and not hunks:
            raise Declined(f"{path}: a change with no hunks")
        if action == "delete" and any(h.new for h in hunks):  # git: "deleted file still has contents"
            raise Declined(f"{path}: a deletion whose hunks keep lines")
        if action == "add" and any(h.old for h in hunks):  # git: "new file depends on old contents"
            raise Declined(f"{path}: a creation whose hunks need old lines")
        files.append(FileChange(path, action, mode, hunks))
    if not files:
        raise Declined("no file in the patch (git: no valid patches)")
    paths = [f.path for f in files]
    for path in paths:
        if paths.count(path) > 1 or any(other.startswith(f"{path}/") for other in paths):
            raise Declined(f"{path}: touched twice, or both as a file and as a directory")
    return files


def apply_hunks(base: str, change: FileChange) -> str:
    """The file after its hunks, each placed where git first tries it.

    Args:
        base: the file's text ("" for a new file).
        change: the file's change.

    Returns:
        The new text.

    Raises:
        Declined: when a hunk's old lines are not at that place (git would search further).
    """
    image = split_lines(base)
    patched = [False] * len(image)  # the lines earlier hunks wrote: git never matches them again
    for number, hunk in enumerate(change.hunks, start=1):
        if hunk.old_start <= 1:  # git: match_beginning
            at = 0
        elif not hunk.trailing:  # git: match_end
            at = len(image) - len(hunk.old)
        else:
            at = hunk.new_start - 1 if hunk.new_start else 0
        if hunk.old_start <= 1 and not hunk.trailing and len(hunk.old) != len(image):
            raise Declined(f"{change.path}: hunk {number} must match the whole file")
        if at < 0 or image[at : at + len(hunk.old)] != hunk.old:
            raise Declined(f"{change.path}: hunk {number} is not where its header says")
        if any(patched[at : at + len(hunk.old)]):
            raise Declined(f"{change.path}: hunk {number} overlaps lines an earlier hunk wrote")
        image[at : at + len(hunk.old)] = hunk.new
        patched[at : at + len(hunk.old)] = [True] * len(hunk.new)
    return "".join(image)


class _CheckedTrees:
    """Base trees already read and found rewritable, by id (a tree's content never changes), so that the
    patches of a build, which share the base's trees, parse and check each one once. Thread-safe; bounded by
    `max_entries` entries in all (least recently used out first)."""

    def __init__(self, max_entries: int = 200_000) -> None:
        self.max_entries = max_entries
        self._trees: OrderedDict[str, dict[str, Entry] | str] = OrderedDict()
        self._entries = 0
        self._lock = threading.Lock()

    def get(self, directory: str, oid: str, body: bytes) -> dict[str, Entry]:
        """A copy of the tree's entries (the caller may change it).

        Raises:
            Declined: when git would write the tree back otherwise (`_rewritable_tree`).
        """
        with self._lock:
            known = self._trees.get(oid)
            if known is not None:
                self._trees.move_to_end(oid)
        if known is None:
            try:
                known = _rewritable_tree(body)
            except Declined as why:
                known = str(why)
            with self._lock:
                if oid not in self._trees:  # another thread that missed it too may have stored it first
                    self._trees[oid] = known
                    self._entries += len(known) if isinstance(known, dict) else 1
                while self._entries > self.max_entries and len(self._trees) > 1:
                    _, dropped = self._trees.popitem(last=False)
                    self._entries -= len(dropped) if isinstance(dropped, dict) else 1
        if isinstance(known, str):
            raise Declined(f"tree {directory!r}: {known}")
        return dict(known)


def _rewritable_tree(body: bytes) -> dict[str, Entry]:
    """A base tree's entries, when git would write them back byte for byte once one of them changes.

    git rebuilds a tree it rewrites from its index, which holds only canonical modes, sorted, each name once;
    a tree an old tool wrote (100664, a zero-padded 040000, out of order) would come out with another id.

    Raises:
        Declined: when the tree is not in that form (the reason without the tree's path).
    """
    try:
        entries = gitobjects.parse_tree(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise Declined(f"not readable ({exc})") from exc
    odd = sorted({e.mode for e in entries.values()} - _CANONICAL_MODES)
    if odd or gitobjects.serialize_tree(entries) != body:
        reason = f"modes {odd}" if odd else "entries out of order or repeated"
        raise Declined(f"{reason}, which git would rewrite")
    return entries


_checked_trees = _CheckedTrees()


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts))]  # "", "a", "a/b" for "a/b/c"


def paths_read(changes: list[FileChange]) -> list[str]:
    """The base paths applying `changes` reads: each file and every directory above it ("" is the root).

    A build asks `BaseFiles.read` for the paths of all its patches at once, so a task's first group costs one
    `git cat-file` process rather than one per patch.
    """
    return sorted({p for c in changes for p in [*_parents(c.path), c.path]})


def apply_patch(
    patch: str | list[FileChange],
    git_dir: Path,
    base_tree: str,
    base_files: BaseFiles,
    store: Callable[[str, bytes], str],
) -> str:
    """The tree `git apply --cached` + `git write-tree` would make of `base_tree` with `patch`.

    Args:
        patch: the patch text (what git would receive), or what `read_patch` made of it.
        git_dir: a SHA-1 repository that has the base's objects (directly or through alternates).
        base_tree: the full id of the base's root tree.
        base_files: the memo the base's trees and files are read through.
        store: takes each new object (kind, body) and returns its id, e.g. `ObjectBuffer.add`, which the
            caller writes to the repository before git reads the tree.

    Returns:
        The new root tree's id.

    Raises:
        Declined: when the patch is outside what this module applies, or would not apply at git's first try.
        GitError: when git cannot read the base's objects.
    """
    changes = read_patch(patch) if isinstance(patch, str) else patch
    base = base_files.read(git_dir, base_tree, paths_read(changes))
    trees: dict[str, dict[str, Entry]] = {}
    for directory in sorted({p for c in changes for p in _parents(c.path)}, key=len):
        obj = base.get(directory)
        if directory:  # what its parent lists under its name: a gitlink's commit is not in the repository
            parent, _, name = directory.rpartition("/")
            listed = trees[parent].get(name)
            if listed is not None and not listed.is_tree:
                raise Declined(f"{directory!r} is not a directory in the base (mode {listed.mode})")
        if obj is not None and obj.kind != "tree":
            raise Declined(f"{directory!r} is a {obj.kind} in the base, not a directory")
        trees[directory] = _checked_trees.get(directory, obj.oid, obj.body) if obj is not None else {}
    for change in changes:
        parent, _, name = change.path.rpartition("/")
        entry = trees[parent].get(name)
        obj = base.get(change.path)
        if change.action == "add":
            if entry is not None:
                raise Declined(f"{change.path}: a new file where the base has one")
            text = ""
        else:
            if entry is None or obj is None or entry.mode not in gitobjects.FILE_MODES:
                raise Declined(f"{change.path}: not a regular file in the base")
            if change.mode is not None and change.mode != entry.mode:
                raise Declined(
                    f"{change.path}: the header's mode {change.mode} is not the base's {entry.mode}"
                )
            if b"\0" in obj.body:
                raise Declined(f"{change.path}: a binary file in the base")
            text = obj.body.decode("utf-8", "surrogateescape")
        result = apply_hunks(text, change)
        if change.action == "delete":
            if result:
                raise Declined(f"{change.path}: the removal leaves content")
            del trees[parent][name]
            continue
        try:
            body = result.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:
            raise Declined(f"{change.path}: text that does not encode: {exc}") from exc
        mode = change.mode if change.action == "add" else entry.mode  # type: ignore[union-attr]
        trees[parent][name] = Entry(mode or "100644", store("blob", body))
    for directory in sorted(trees, key=lambda d: -len(d.split("/")) if d else 0):
        if not directory:
            continue
        parent, _, name = directory.rpartition("/")
        if trees[directory]:
            oid = store("tree", gitobjects.serialize_tree(trees[directory]))
            trees[parent][name] = Entry(gitobjects.TREE_MODE, oid)
        else:  # git keeps no empty directory
            trees[parent].pop(name, None)
    return store("tree", gitobjects.serialize_tree(trees[""]))


__all__ = ["Declined", "FileChange", "apply_hunks", "apply_patch", "paths_read", "read_patch"]
