"""Reading unified diffs: safety checks on paths, statistics, and the key that makes two patches equivalent.

Pure text processing (unidiff); nothing here touches git or the file system.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from grader.errors import PatchError
from grader.groups.models import PatchStats
from grader.workspace.hunks import split_lines

DEFAULT_MAX_PATCH_BYTES = 2_000_000

_TEST_PATH = re.compile(r"(^|/)(tests?|testing)/|(^|/)test_[^/]*$|_tests?\.[^/]+$|(^|/)conftest\.py$")
_DIFF_GIT = re.compile(r"^diff --git (\"?a/.*\"?) (\"?b/.*\"?)$")
_HEADER_PATH = re.compile(r"^(?:---|\+\+\+) (.*?)(?:\t.*)?$")
_RENAME_COPY = re.compile(r"^(?:rename|copy) (?:from|to) (.*)$")
_SYMLINK_MODE = re.compile(r"^(?:new file mode|new mode) 120000$")


def is_test_path(path: str) -> bool:
    """Whether a repository path looks like a test file or lives in a test directory."""
    return bool(_TEST_PATH.search(path))


def ensure_final_newline(patch: str) -> str:
    """A diff whose last line lacks its newline is ordinary input (editors and JSON round trips drop it)."""
    return patch if not patch or patch.endswith("\n") else patch + "\n"


_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
_OCTAL_BYTE = re.compile(r"[0-3][0-7]{2}")


def _unquote(path: str) -> str:
    """A name git C-quoted (`"a/caf\\303\\251.txt"`, as core.quotepath makes it) as the name it stands for.

    Octal escapes are bytes: the result is those bytes read as UTF-8, bytes that are not UTF-8 kept as
    surrogateescape, the way a raw name in a patch reads. A name without quotes, or with an escape git would
    not write, comes back as it is.
    """
    if not (len(path) >= 2 and path[0] == '"' and path[-1] == '"'):
        return path
    body, raw, at = path[1:-1], bytearray(), 0
    try:
        while at < len(body):
            char = body[at]
            if char != "\\":
                raw += char.encode("utf-8", "surrogateescape")
                at += 1
            elif body[at + 1 : at + 2] in _C_ESCAPES:
                raw.append(_C_ESCAPES[body[at + 1]])
                at += 2
            elif _OCTAL_BYTE.fullmatch(body[at + 1 : at + 4]):
                raw.append(int(body[at + 1 : at + 4], 8))
                at += 4
            else:
                return path
    except UnicodeEncodeError:  # a lone surrogate: no bytes to decode
        return path
    return raw.decode("utf-8", "surrogateescape")


def strip_prefix(path: str) -> str:
    """A diff header's path without its quotes and a/ or b/ prefix."""
    path = _unquote(path.strip())
    return path[2:] if path[:2] in ("a/", "b/") else path


def _header_paths(patch: str) -> Iterable[tuple[int, str]]:
    # At LF only, as git reads it; the prefix tests spare the regular expressions nearly every line.
    for number, line in enumerate(patch.split("\n"), start=1):
        if not line.startswith(("diff --git ", "--- ", "+++ ", "rename ", "copy ")):
            continue
        if m := _DIFF_GIT.match(line):
            yield number, strip_prefix(m.group(1))
            yield number, strip_prefix(m.group(2))
        elif line.startswith(("--- ", "+++ ")) and (m := _HEADER_PATH.match(line)):
            raw = m.group(1).strip()
            if raw == "/dev/null":
                continue
            if raw.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", raw):
                yield number, raw  # absolute: reported as such by check_paths
            else:
                yield number, strip_prefix(raw)
        elif m := _RENAME_COPY.match(line):
            yield number, _unquote(m.group(1).strip())


def check_paths(patch: str) -> None:
    """Refuse a patch naming a path that is absolute, climbs out with `..`, or points into `.git`.

    git apply refuses most of these too; checking first gives a message that names the path, and keeps the
    guarantee independent of git's version.

    Raises:
        PatchError: naming the line and the path.
    """
    for number, path in _header_paths(patch):
        if path.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", path):
            raise PatchError(f"line {number}: absolute path {path!r}")
        parts = re.split(r"[\\/]+", path)
        if ".." in parts:
            raise PatchError(f"line {number}: path {path!r} climbs out of the repository")
        if any(part.lower().rstrip(". ") == ".git" for part in parts):
            raise PatchError(f"line {number}: path {path!r} points into .git")


def check_symlinks(patch: str) -> None:
    """Refuse new symlinks whose target is absolute or leaves the repository.

    A symlink blob is harmless in git, but a tree materialized later (for a test run) would follow it.

    Raises:
        PatchError: naming the link and its target.
    """
    if "120000" not in patch:  # no symlink mode anywhere: nothing to check
        return
    lines = patch.splitlines()
    current: str | None = None
    symlink = False
    for i, line in enumerate(lines):
        if m := _DIFF_GIT.match(line):
            current, symlink = strip_prefix(m.group(2)), False
        elif _SYMLINK_MODE.match(line):
            symlink = True
        elif symlink and line.startswith("+") and not line.startswith("+++") and current is not None:
            target = line[1:]
            depth = len(current.split("/")) - 1
            climbs = 0
            for part in re.split(r"[\\/]+", target):
                if part == "..":
                    climbs += 1
                    if climbs > depth:
                        break
                elif part not in ("", "."):
                    depth += 1
            if target.startswith("/") or climbs > depth:
                raise PatchError(
                    f"line {i + 1}: symlink {current!r} points outside the repository ({target!r})"
                )


_HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")


def _ends_hunk(lines: list[str], j: int) -> bool:
    line = lines[j]
    if line.startswith(("@@", "diff --git ")):
        return True
    return line.startswith("--- ") and j + 1 < len(lines) and lines[j + 1].startswith("+++ ")


def recount(patch: str) -> str:
    """Rewrite each hunk header's line counts from the lines that follow it, as `git apply --recount` does.

    Model-written diffs often carry wrong counts. A last hunk that ends with the text while short of changed
    lines its header promises is a truncated patch and raises PatchError; one short only of trailing context
    (up to 3 lines, as when trailing blank lines were stripped) keeps its edit intact and is recounted.
    """
    lines = split_lines(patch)  # at LF only, as git reads a patch: a form feed is no line end
    result: list[str] = []
    i = 0
    while i < len(lines):
        header = _HUNK_HEADER.match(lines[i].rstrip("\r\n"))
        if not header:
            result.append(lines[i])
            i += 1
            continue
        old = new = 0
        j = i + 1
        while j < len(lines) and not _ends_hunk(lines, j):
            marker = lines[j][:1]
            if marker in (" ", "\n", "\r"):  # a blank context line may have lost its leading space
                old, new = old + 1, new + 1
            elif marker == "-":
                old += 1
            elif marker == "+":
                new += 1
            elif marker != "\\":
                break
            j += 1
        promised = re.match(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))?", lines[i])
        promised_old = int(promised.group(1) or 1) if promised else old
        promised_new = int(promised.group(2) or 1) if promised else new
        if old == 0 and new == 0:
            raise PatchError(f"malformed diff: the hunk at line {i + 1} has no lines")
        short_old, short_new = promised_old - old, promised_new - new
        if j == len(lines) and (short_old > 0 or short_new > 0) and not (short_old == short_new <= 3):
            raise PatchError(
                f"truncated: the hunk at line {i + 1} promises {promised_old}/{promised_new} old/new lines, "
                f"the patch ends after {old}/{new}"
            )
        result.append(f"@@ -{header.group(1)},{old} +{header.group(2)},{new} @@{header.group(3)}\n")
        result.extend(lines[i + 1 : j])
        i = j
    return "".join(result)


def parse(patch: str, exact_counts: bool = False) -> PatchSet:
    """Parse a unified diff, with hunk headers recounted (see `recount`) unless `exact_counts` says they
    are right already (git's own output).

    Raises PatchError with the reason when the diff is malformed or truncated.
    """
    text = ensure_final_newline(patch)
    try:
        return PatchSet(text if exact_counts else recount(text))
    except UnidiffParseError as exc:
        raise PatchError(f"malformed diff: {exc}") from exc


def validate(patch: str, max_bytes: int = DEFAULT_MAX_PATCH_BYTES) -> PatchSet:
    """All checks a patch passes before git sees it; returns the parsed patch.

    Raises:
        PatchError: the patch is not UTF-8 text (a lone surrogate), is over `max_bytes`, holds a NUL byte,
            names a path or symlink that leaves the repository (`check_paths`, `check_symlinks`), does not
            parse, or is no unified diff.
    """
    try:
        size = len(patch.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError as exc:  # a lone surrogate ("\\ud800" is valid JSON): no bytes git can take
        raise PatchError(
            f"patch is not UTF-8 text: {patch[exc.start : exc.end]!r} at character {exc.start}"
        ) from None
    if size > max_bytes:
        raise PatchError(f"patch is {size:,} bytes, over the cap of {max_bytes:,}")
    if "\x00" in patch:
        raise PatchError("patch contains a NUL byte")
    check_paths(patch)
    check_symlinks(patch)
    parsed = parse(patch)
    if patch.strip() and not len(parsed) and "GIT binary patch" not in patch:
        raise PatchError("not a unified diff: no file header found")
    return parsed


def file_path(patched_file) -> str:
    """A patched file's repository path, without the a/ or b/ prefix."""
    return strip_prefix(patched_file.path)


def stats(parsed: PatchSet) -> PatchStats:
    """Files touched, lines added and removed, and the kinds of change, per unidiff."""
    files = [file_path(f) for f in parsed]
    return PatchStats(
        files=files,
        files_touched=len(files),
        lines_added=sum(f.added for f in parsed),
        lines_removed=sum(f.removed for f in parsed),
        new_files=[file_path(f) for f in parsed if f.is_added_file],
        deleted_files=[file_path(f) for f in parsed if f.is_removed_file],
        renamed_files=[file_path(f) for f in parsed if f.is_rename],
        test_files=[p for p in files if is_test_path(p)],
        binary_files=[file_path(f) for f in parsed if f.is_binary_file],
    )


def _normalize_line(text: str) -> str:
    return " ".join(text.split())


@dataclass(frozen=True)
class FileChange:
    """The content of one file's change, with context and line numbers dropped."""

    path: str
    removed: tuple[str, ...] = field(default_factory=tuple)
    added: tuple[str, ...] = field(default_factory=tuple)


def changes(parsed: PatchSet, normalize_whitespace: bool = False) -> list[FileChange]:
    """What each file's change removes and adds, in order, sorted by path.

    Context lines and hunk positions are left out, so the same edit made with more context, or applied at an
    offset, compares equal. With `normalize_whitespace`, runs of whitespace collapse and blank lines drop out.
    """
    result = []
    for patched_file in parsed:
        removed: list[str] = []
        added: list[str] = []
        for hunk in patched_file:
            for line in hunk:
                if not (line.is_added or line.is_removed):
                    continue
                text = line.value.rstrip("\n")
                if normalize_whitespace:
                    text = _normalize_line(text)
                    if not text:
                        continue
                (added if line.is_added else removed).append(text)
        result.append(FileChange(file_path(patched_file), tuple(removed), tuple(added)))
    return sorted(result, key=lambda change: change.path)


def foreign_lines(patch: PatchSet, branch: PatchSet) -> str | None:
    """The first line git's resulting tree has that neither the base nor the patch holds, if any.

    A plain `git apply` is authoritative about where hunks land; what can still go wrong is a line the patch
    never wrote, such as two lines joined at a missing final newline. Line counts and positions are not
    compared: git's diff of the resulting tree may pair an identical deleted and re-added line differently
    from the patch (a blank line moved, whitespace-only lines), and that is the same tree.

    Args:
        patch: The patch as applied.
        branch: The diff of the resulting tree against the base.

    Returns:
        A sentence naming the file and the foreign line, or None when every added line is accounted for.
    """
    known: dict[str, set[str]] = {}
    for patched_file in patch:
        lines = known.setdefault(file_path(patched_file), set())
        for hunk in patched_file:
            lines.update(line.value.rstrip("\n") for line in hunk)
    patch_paths = sorted(known)
    branch_paths = sorted(file_path(f) for f in branch)
    if patch_paths != branch_paths:
        return f"files {patch_paths} in the patch, {branch_paths} on the branch"
    for patched_file in branch:
        path = file_path(patched_file)
        # The branch diff's own context and removed lines are base lines: a realigned diff may re-add them.
        base_lines = {line.value.rstrip("\n") for hunk in patched_file for line in hunk if not line.is_added}
        for hunk in patched_file:
            for line in hunk:
                text = line.value.rstrip("\n")
                if line.is_added and text not in known[path] and text not in base_lines:
                    return f"{path}: the branch has a line the patch never wrote: {text[:80]!r}"
    return None


def equivalence_key(parsed: PatchSet) -> str:
    """A digest equal for patches that make the same edits up to whitespace."""
    digest = hashlib.sha256()
    for change in changes(parsed, normalize_whitespace=True):
        if not change.removed and not change.added:
            digest.update(b"F" + change.path.encode() + b"\0")  # mode-only, rename-only or binary change
        for tag, lines in ((b"P", (change.path,)), (b"-", change.removed), (b"+", change.added)):
            for text in lines:
                digest.update(tag + text.encode("utf-8", "surrogateescape") + b"\0")
    return digest.hexdigest()
