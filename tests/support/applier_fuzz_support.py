"""A differential fuzz of the in-process applier (grader.workspace.exactapply) against git itself.

Each case is a base tree and a patch: a real `git diff`, or one made here, mutated by one class of change
(`MUTATIONS`), or applied to a base tree rewritten the way old tools wrote trees (`odd_base`). Both sides
apply it: `git apply --cached` + `git write-tree` on an index of the base, and `exactapply.apply_patch`.
A divergence is the applier making a tree where git refuses the patch or makes another tree; the applier
declining is never one (the workspace then hands the patch to git).

Shared by tests/workspace/test_applier_fuzz.py (a few seconds, seeded) and bench/exactapply_fuzz.py (a long
run on a real history).
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from grader.workspace import bare, exactapply, gitobjects
from grader.workspace.gitcmd import safe_env

_HUNK_HEADER = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)\n", re.ASCII)
MARKER = "\\ No newline at end of file\n"
ODD_NAMES = [
    "café.txt",
    "caf\udce9.txt",  # byte 0xE9, not UTF-8, as Python holds an undecodable file name
    "x y.txt",
    "x .txt",
    " x.txt",
    "git~1/x.txt",
    ".git./x.txt",
    ".GIT/x.txt",
    "a//b.txt",
    "./x.txt",
    'q"uote.txt',
    "tab\tx.txt",
    "back\\slash.txt",
    "x b/y.txt",
    "caf\ud800.txt",  # a lone surrogate: no bytes at all
    ".GIT:stream/x.txt",
    ".g\u200cit/x.txt",
    ".github/ci.yml",  # ordinary names close to .git
    ".gitignore",
    "git~2/x.txt",
]
"""Names a patch may hold; the synthetic base has the first three, so patches to them can apply."""


def _git(git_dir: Path, *args: str, env: dict[str, str] | None = None, input: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", *args],
        env=env or safe_env(),
        input=input,
        capture_output=True,
        check=True,
    ).stdout


# -- the two appliers ----------------------------------------------------------------------------------------


class Oracle:
    """git and the in-process applier, side by side, on the trees of one repository.

    Neither writes to that repository: git works in a scratch repository that borrows its objects (where the
    odd base trees go too), and the applier in another that borrows the scratch one's.

    Args:
        source_objects: the `objects` directory of a SHA-1 repository holding the base trees.
        work: a directory for the two repositories and the index files (made if missing).
    """

    def __init__(self, source_objects: Path, work: Path) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.git_dir = work / "git.git"
        bare.init_bare(self.git_dir, source_objects, head="refs/heads/base")
        self.ours_dir = work / "ours.git"
        bare.init_bare(self.ours_dir, self.git_dir / "objects", head="refs/heads/base")
        self.memo = gitobjects.BaseFiles()
        self.buffer = gitobjects.ObjectBuffer()
        self._indexes: dict[str, Path] = {}

    def _index_of(self, tree: str) -> Path:
        if tree not in self._indexes:
            index = self.work / f"base-{len(self._indexes)}.index"
            _git(self.git_dir, "read-tree", tree, env=safe_env({"GIT_INDEX_FILE": str(index)}))
            self._indexes[tree] = index
        return self._indexes[tree]

    def git_tree(self, base_tree: str, patch: str) -> str | None:
        """The tree git makes of `base_tree` with `patch` (its text as bytes), or None when git refuses it."""
        try:
            raw = patch.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a lone surrogate: there are no bytes to give git
            return None
        index = self.work / "case.index"
        shutil.copyfile(self._index_of(base_tree), index)
        env = safe_env({"GIT_INDEX_FILE": str(index)})
        applied = subprocess.run(
            ["git", f"--git-dir={self.git_dir}", "apply", "--cached", "-"],
            env=env,
            input=raw,
            capture_output=True,
        )
        if applied.returncode != 0:
            return None
        return _git(self.git_dir, "write-tree", env=env).decode().strip()

    def our_tree(self, base_tree: str, patch: str) -> str | None:
        """The tree exactapply makes, or None when it declines."""
        try:
            return exactapply.apply_patch(patch, self.ours_dir, base_tree, self.memo, self.buffer.add)
        except exactapply.Declined:
            return None


@dataclass
class Tally:
    """What each mutation class gave: cases, what git applied, what the applier took, and divergences."""

    cases: Counter[str] = field(default_factory=Counter)
    git_applied: Counter[str] = field(default_factory=Counter)
    taken: Counter[str] = field(default_factory=Counter)
    divergences: list[str] = field(default_factory=list)

    def add(self, kind: str, oracle: Oracle, base_tree: str, patch: str) -> None:
        """Apply one case both ways and record it."""
        ours = oracle.our_tree(base_tree, patch)
        theirs = oracle.git_tree(base_tree, patch)
        self.cases[kind] += 1
        self.git_applied[kind] += theirs is not None
        self.taken[kind] += ours is not None
        if ours is not None and ours != theirs:
            what = "git refuses it" if theirs is None else f"git makes {theirs[:12]}"
            self.divergences.append(f"{kind}: the applier makes {ours[:12]}, {what}; patch {patch[:400]!r}")

    def table(self) -> str:
        """One line per class: cases, applied by git, taken in process, divergences."""
        per_kind = Counter(d.split(":", 1)[0] for d in self.divergences)
        lines = [f"{'class':<22} {'cases':>6} {'git':>6} {'taken':>6} {'diverge':>7}"]
        for kind in sorted(self.cases):
            lines.append(
                f"{kind:<22} {self.cases[kind]:>6} {self.git_applied[kind]:>6} {self.taken[kind]:>6} "
                f"{per_kind[kind]:>7}"
            )
        total = sum(self.cases.values())
        lines.append(
            f"{'all':<22} {total:>6} {sum(self.git_applied.values()):>6} {sum(self.taken.values()):>6} "
            f"{len(self.divergences):>7}"
        )
        return "\n".join(lines)


# -- patches as text, taken apart and put together -----------------------------------------------------------


@dataclass
class Hunk:
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    tail: str  # what follows the closing "@@", with the newline
    body: list[str]  # its lines, "\\" markers included

    def header(self) -> str:
        return f"@@ -{self.old_start},{self.old_count} +{self.new_start},{self.new_count} @@{self.tail}"

    def recount(self) -> None:
        kinds = [line[:1] if line != "\n" else " " for line in self.body]
        self.old_count = sum(k in " -" for k in kinds)
        self.new_count = sum(k in " +" for k in kinds)


@dataclass
class FileDiff:
    header: list[str]  # "diff --git" through "+++", or the extended header alone
    hunks: list[Hunk]

    def text(self) -> str:
        return "".join(self.header) + "".join(h.header() + "".join(h.body) for h in self.hunks)


def split_patch(patch: str) -> list[FileDiff]:
    """git's own diff output, file by file and hunk by hunk (not a general parser: counts are trusted)."""
    lines = patch.splitlines(keepends=True)
    files: list[FileDiff] = []
    at = 0
    while at < len(lines):
        if lines[at].startswith("diff --git "):
            files.append(FileDiff([lines[at]], []))
        elif m := _HUNK_HEADER.fullmatch(lines[at]):
            old_count = int(m.group(2)) if m.group(2) is not None else 1
            new_count = int(m.group(4)) if m.group(4) is not None else 1
            hunk = Hunk(int(m.group(1)), old_count, int(m.group(3)), new_count, m.group(5) + "\n", [])
            old, new = old_count, new_count
            at += 1
            while (old or new or (at < len(lines) and lines[at].startswith("\\"))) and at < len(lines):
                line = lines[at]
                kind = " " if line == "\n" else line[:1]
                old -= kind in " -"
                new -= kind in " +"
                hunk.body.append(line)
                at += 1
            files[-1].hunks.append(hunk)
            continue
        elif files:
            files[-1].header.append(lines[at])
        at += 1
    return files


def join_patch(files: list[FileDiff]) -> str:
    return "".join(f.text() for f in files)


def _with_hunks(files: list[FileDiff]) -> list[tuple[FileDiff, Hunk]]:
    return [(f, h) for f in files for h in f.hunks]


# -- mutation classes ----------------------------------------------------------------------------------------

Mutation = Callable[[random.Random, str], "str | None"]
"""Takes a patch, returns it mutated (None when the class does not fit this patch)."""


def _one_hunk(rng: random.Random, patch: str, change: Callable[[Hunk], bool | None]) -> str | None:
    files = split_patch(patch)
    pairs = _with_hunks(files)
    if not pairs:
        return None
    _, hunk = rng.choice(pairs)
    if change(hunk) is False:
        return None
    return join_patch(files)


def _offset(rng: random.Random, patch: str) -> str | None:
    def change(h: Hunk) -> None:
        h.new_start = max(0, h.new_start + rng.choice([-3, -2, -1, 1, 2, 4]))

    return _one_hunk(rng, patch, change)


def _old_offset(rng: random.Random, patch: str) -> str | None:
    def change(h: Hunk) -> None:
        h.old_start = max(0, h.old_start + rng.choice([-2, -1, 1, 2]))

    return _one_hunk(rng, patch, change)


def _count(rng: random.Random, patch: str) -> str | None:
    def change(h: Hunk) -> None:
        if rng.random() < 0.5:
            h.old_count = max(0, h.old_count + rng.choice([-1, 1]))
        else:
            h.new_count = max(0, h.new_count + rng.choice([-1, 1]))

    return _one_hunk(rng, patch, change)


def _header_form(rng: random.Random, patch: str) -> str | None:
    """Equivalent headers written otherwise: leading zeros, a count of 1 left out, a context text."""
    files = split_patch(patch)
    if not files:
        return None
    text = join_patch(files)
    form = rng.choice(["zeros", "omit-one", "tail"])
    if form == "zeros":
        return re.sub(r"@@ -(\d+)", lambda m: f"@@ -00{m.group(1)}", text, count=1)
    if form == "omit-one":
        return re.sub(r"(@@ -\d+),1 ", r"\1 ", text)
    return re.sub(r" @@\n", " @@ def f():\n", text, count=1)


def _context(rng: random.Random, patch: str) -> str | None:
    def change(h: Hunk) -> bool:
        context = [i for i, line in enumerate(h.body) if line.startswith(" ") or line == "\n"]
        if not context:
            return False
        i = rng.choice(context)
        h.body[i] = rng.choice([" not in the file\n", h.body[i].rstrip("\n") + " \n", "\n", " \n"])
        return True

    return _one_hunk(rng, patch, change)


def _crlf(rng: random.Random, patch: str) -> str | None:
    if rng.random() < 0.5:
        return patch.replace("\n", "\r\n")
    files = split_patch(patch)
    for _, h in _with_hunks(files):
        h.body = [line if line.startswith("\\") else line.replace("\n", "\r\n") for line in h.body]
    return join_patch(files)


def _change_groups(h: Hunk) -> list[tuple[int, int]]:
    """(first, end) of each run of changed lines in the hunk's body."""
    groups: list[tuple[int, int]] = []
    for i, line in enumerate(h.body):
        changed = line[:1] in "+-" and line != "\n"
        if changed and groups and groups[-1][1] == i:
            groups[-1] = (groups[-1][0], i + 1)
        elif changed:
            groups.append((i, i + 1))
    return groups


def _split(h: Hunk, cut: int, overlap: int) -> tuple[Hunk, Hunk]:
    """`h` as two hunks: the first ends at body line `cut`, the second starts `overlap` lines before it."""
    first_body, second_body = h.body[:cut], h.body[cut - overlap :]
    before = h.body[: cut - overlap]
    old_before = sum((line[:1] in " -" or line == "\n") for line in before)
    new_before = sum((line[:1] in " +" or line == "\n") for line in before)
    first = Hunk(h.old_start, 0, h.new_start, 0, h.tail, first_body)
    second = Hunk(h.old_start + old_before, 0, h.new_start + new_before, 0, "\n", second_body)
    first.recount()
    second.recount()
    return first, second


def _split_hunk(rng: random.Random, patch: str, overlap: bool) -> str | None:
    files = split_patch(patch)
    candidates = []
    for f in files:
        for n, h in enumerate(f.hunks):
            groups = _change_groups(h)
            for (_, end), (start, _) in zip(groups, groups[1:], strict=False):
                if start - end >= 2:  # at least two context lines between two changes
                    candidates.append((f, n, end, start))
    if not candidates:
        return None
    f, n, end, start = rng.choice(candidates)
    cut = rng.randint(end + 1, start)
    shared = rng.randint(1, cut - end) if overlap else 0
    f.hunks[n : n + 1] = list(_split(f.hunks[n], cut, shared))
    return join_patch(files)


def _overlap(rng: random.Random, patch: str) -> str | None:
    """Two hunks sharing context lines (git refuses, or finds the second further on); else a hunk twice."""
    split = _split_hunk(rng, patch, overlap=True)
    if split is not None:
        return split
    files = split_patch(patch)
    pairs = [(f, n) for f in files for n in range(len(f.hunks))]
    if not pairs:
        return None
    f, n = rng.choice(pairs)
    f.hunks.insert(n + 1, Hunk(**vars(f.hunks[n]) | {"body": list(f.hunks[n].body)}))
    return join_patch(files)


def _swap(rng: random.Random, patch: str) -> str | None:
    files = [f for f in split_patch(patch)]
    several = [f for f in files if len(f.hunks) > 1]
    if not several:
        return None
    rng.choice(several).hunks.reverse()
    return join_patch(files)


BAD_MARKERS = [
    "\\x\n",
    "\\\n",
    "\\ x\n",
    "\\No newline at end of file\n",
    "\\ 123456789\n",  # 12 bytes: git 2.47 and later read it differently at a patch's end
    "\\ 1234567890\n",  # 13 bytes: every git reads it as a marker
    "\\\tNo newline at end of file\n",
]


def _marker(rng: random.Random, patch: str) -> str | None:
    """A marker, good or malformed, added after a body line, or one the patch has taken away."""
    files = split_patch(patch)
    pairs = _with_hunks(files)
    if not pairs:
        return None
    _, h = rng.choice(pairs)
    existing = [i for i, line in enumerate(h.body) if line.startswith("\\")]
    roll = rng.random()
    if existing and roll < 0.2:
        del h.body[rng.choice(existing)]
    elif existing and roll < 0.4:
        h.body[rng.choice(existing)] = rng.choice(BAD_MARKERS)
    else:
        at = rng.randint(0, len(h.body))
        h.body.insert(at, rng.choice([MARKER, *BAD_MARKERS]))
    return join_patch(files)


def _no_change(rng: random.Random, patch: str) -> str | None:
    """A hunk left with context only, or with no line at all (git: corrupt patch)."""

    def change(h: Hunk) -> None:
        if rng.random() < 0.5:
            h.body = [" " + line[1:] if line.startswith("-") else line for line in h.body if line[:1] != "+"]
            h.recount()
        else:
            h.body, h.old_count, h.new_count = [], 0, 0

    return _one_hunk(rng, patch, change)


DIGITS = ["\u0660", "\u06f0", "\u0966", "\uff10", "\u09e6", "\U0001d7ce"]
"""Zeros of other scripts (Arabic-Indic, Extended Arabic-Indic, Devanagari, fullwidth, Bengali, math bold)."""


def _digits(rng: random.Random, patch: str) -> str | None:
    headers = [m for m in re.finditer(r"^@@ -(\d+)", patch, re.M)]
    if not headers:
        return None
    m = rng.choice(headers)
    at = m.start(1) + rng.randrange(len(m.group(1)))
    digit = chr(ord(rng.choice(DIGITS)) + int(patch[at]))
    return patch[:at] + digit + patch[at + 1 :]


def _deletion_keeps(rng: random.Random, patch: str) -> str | None:
    """A deletion whose hunk also adds a line (an empty one, maybe without its newline)."""
    files = split_patch(patch)
    deletions = [f for f in files if any(line.startswith("deleted file mode") for line in f.header)]
    if not deletions or not deletions[0].hunks:
        return None
    h = rng.choice(deletions).hunks[-1]
    h.body += rng.choice([["+\n", MARKER], ["+\n"], ["+x\n"], ["+x\n", MARKER], [" \n"]])
    h.recount()
    return join_patch(files)


def _no_final_newline(rng: random.Random, patch: str) -> str | None:
    return patch.rstrip("\n") if patch.endswith("\n") else None


def _truncate(rng: random.Random, patch: str) -> str | None:
    lines = patch.splitlines(keepends=True)
    if len(lines) < 3:
        return None
    return "".join(lines[: rng.randint(1, len(lines) - 1)])


def _garbage(rng: random.Random, patch: str) -> str | None:
    files = split_patch(patch)
    junk = rng.choice(
        ["-- \n2.39.0\n", "some words\n", "\n", "From: x\n", "+stray\n", " stray\n", "@@ junk\n"]
    )
    at = rng.randint(0, len(files))
    return join_patch(files[:at]) + junk + join_patch(files[at:])


def _index_line(rng: random.Random, patch: str) -> str | None:
    files = split_patch(patch)
    if not files:
        return None
    f = rng.choice(files)
    index = [i for i, line in enumerate(f.header) if line.startswith("index ")]
    if not index:
        return None
    i = index[0]
    roll = rng.random()
    if roll < 0.3:  # the mode left out, or the whole line
        without_mode = re.sub(r" 1\d{5}\n$", "\n", f.header[i])
        if without_mode != f.header[i]:
            f.header[i] = without_mode
        else:
            del f.header[i]
    elif roll < 0.6:
        mode = rng.choice(["100644", "100755", "100664", "120000"])
        f.header[i] = re.sub(r"( 1\d{5})?\n$", f" {mode}\n", f.header[i])
    elif roll < 0.8:
        f.header[i] = f.header[i].replace("..", "0..", 1)  # 41 hex digits when the ids are full
    else:
        f.header.insert(i, f.header[i])
    return join_patch(files)


def _mode_line(rng: random.Random, patch: str) -> str | None:
    files = split_patch(patch)
    with_mode = [f for f in files if any(" file mode " in line for line in f.header)]
    if not with_mode:
        f = rng.choice(files) if files else None
        if f is None:
            return None
        f.header.insert(
            1, rng.choice(["old mode 100644\n", "new mode 100755\n", "deleted file mode 100644\n"])
        )
        return join_patch(files)
    f = rng.choice(with_mode)
    i = next(n for n, line in enumerate(f.header) if " file mode " in line)
    roll = rng.random()
    if roll < 0.6:
        mode = rng.choice(["100755", "100664", "120000", "160000", "644", "0100644"])
        f.header[i] = re.sub(r"mode \d+", f"mode {mode}", f.header[i])
    else:
        f.header.insert(i, f.header[i])
    return join_patch(files)


def _path(rng: random.Random, patch: str) -> str | None:
    """One file's name replaced, in every header line, by an unusual one."""
    files = split_patch(patch)
    if not files:
        return None
    f = rng.choice(files)
    m = re.match(r"diff --git a/(.*) b/\1\n", f.header[0])
    if m is None:
        return None
    old, new = m.group(1), rng.choice(ODD_NAMES)
    f.header = [line.replace(f"a/{old}", f"a/{new}").replace(f"b/{old}", f"b/{new}") for line in f.header]
    return join_patch(files)


def _duplicate_file(rng: random.Random, patch: str) -> str | None:
    files = split_patch(patch)
    if not files:
        return None
    f = rng.choice(files)
    files.insert(files.index(f) + 1, f)
    return join_patch(files)


def _blank_context(rng: random.Random, patch: str) -> str | None:
    """Empty context lines in the "\\n" form GNU diff writes (git takes both)."""
    if "\n \n" not in patch:
        return None
    return patch.replace("\n \n", "\n\n")


def _identity(rng: random.Random, patch: str) -> str | None:
    return patch


MUTATIONS: dict[str, Mutation] = {
    "none": _identity,
    "offset": _offset,
    "old-offset": _old_offset,
    "count": _count,
    "header-form": _header_form,
    "context": _context,
    "blank-context": _blank_context,
    "crlf": _crlf,
    "split": lambda rng, patch: _split_hunk(rng, patch, overlap=False),
    "overlap": _overlap,
    "swap-hunks": _swap,
    "marker": _marker,
    "no-change-hunk": _no_change,
    "digits": _digits,
    "deletion-keeps": _deletion_keeps,
    "no-final-newline": _no_final_newline,
    "truncate": _truncate,
    "garbage": _garbage,
    "index-line": _index_line,
    "mode-line": _mode_line,
    "path": _path,
    "duplicate-file": _duplicate_file,
}
"""Every mutation class by name ("none" leaves the patch as it is)."""


def mutants(
    rng: random.Random, patch: str, per_patch: int, start: int | None = None
) -> Iterator[tuple[str, str]]:
    """(class, patch) pairs: the patch itself, then up to `per_patch` mutants.

    The classes are taken in turn from `start` (drawn at random when None), a class that does not fit the
    patch giving its turn to the next, so that successive calls with `start` advanced by `per_patch` try
    every class about equally often.
    """
    yield "none", patch
    kinds = [k for k in MUTATIONS if k != "none"]
    first = rng.randrange(len(kinds)) if start is None else start
    made = 0
    for step in range(len(kinds)):
        if made == per_patch:
            break
        kind = kinds[(first + step) % len(kinds)]
        mutated = MUTATIONS[kind](rng, patch)
        if mutated is not None and mutated != patch:
            made += 1
            yield kind, mutated


# -- odd bases -----------------------------------------------------------------------------------------------


def _raw_entries(body: bytes) -> list[tuple[bytes, bytes, bytes]]:
    entries, at = [], 0
    while at < len(body):
        space = body.index(b" ", at)
        nul = body.index(b"\0", space)
        entries.append((body[at:space], body[space + 1 : nul], body[nul + 1 : nul + 21]))
        at = nul + 21
    return entries


def odd_base(rng: random.Random, git_dir: Path, base_tree: str, paths: list[str]) -> str | None:
    """`base_tree` with one tree on the way to one of `paths` rewritten as an old tool might have written it:
    a file's mode 100664 or 100775, a subtree's mode zero-padded (040000), or two entries out of order.

    Returns the new root tree's id (written to `git_dir`), or None when nothing fits.
    """
    if not paths:
        return None
    path = rng.choice(paths)
    parts = path.split("/")[:-1]
    depth = rng.randint(0, len(parts))
    chain = [base_tree]
    for part in parts[:depth]:
        listing = _git(git_dir, "cat-file", "-p", chain[-1]).decode("utf-8", "surrogateescape")
        ids = {line.split("\t", 1)[1]: line.split()[2] for line in listing.splitlines()}
        if part not in ids:
            return None
        chain.append(ids[part])
    entries = _raw_entries(_git(git_dir, "cat-file", "tree", chain[-1]))
    roll = rng.random()
    files = [n for n, e in enumerate(entries) if e[0] in (b"100644", b"100755")]
    trees = [n for n, e in enumerate(entries) if e[0] == b"40000"]
    if roll < 0.5 and files:
        n = rng.choice(files)
        entries[n] = (rng.choice([b"100664", b"100775", b"100600"]), *entries[n][1:])
    elif roll < 0.8 and trees:
        n = rng.choice(trees)
        entries[n] = (b"040000", *entries[n][1:])
    elif len(entries) >= 2:
        n = rng.randrange(len(entries) - 1)
        entries[n], entries[n + 1] = entries[n + 1], entries[n]
    else:
        return None
    oid = _hash_tree(git_dir, entries)
    for level in range(len(chain) - 2, -1, -1):  # the trees above, with the new id in place
        name = parts[level].encode("utf-8", "surrogateescape")
        above = _raw_entries(_git(git_dir, "cat-file", "tree", chain[level]))
        above = [(m, n, bytes.fromhex(oid) if n == name else o) for m, n, o in above]
        oid = _hash_tree(git_dir, above)
    return oid


def _hash_tree(git_dir: Path, entries: list[tuple[bytes, bytes, bytes]]) -> str:
    body = b"".join(mode + b" " + name + b"\0" + oid for mode, name, oid in entries)
    out = _git(git_dir, "hash-object", "-t", "tree", "--literally", "-w", "--stdin", input=body)
    return out.decode().strip()


def touched_paths(patch: str) -> list[str]:
    return re.findall(r"^diff --git a/(.*) b/\1$", patch, re.M)


# -- synthetic patches ---------------------------------------------------------------------------------------

WORDS = [
    "x = 1",
    "return x",
    "pass",
    "",
    "def f():",
    "    y = 2",
    "# note",
    "if y:",
    "    return y",
    "z = [1]",
]


def synthetic_files(rng: random.Random) -> dict[str, str]:
    """A small tree with repeated lines (so hunks can be found again elsewhere), odd names, a file without
    its final newline, a CRLF file and an empty one."""

    def text(lines: int) -> str:
        return "".join(rng.choice(WORDS) + "\n" for _ in range(lines))

    return {
        "README.md": "readme\n",
        "a/one.py": text(40),
        "a/two.py": text(25).rstrip("\n"),
        "a/b/deep.py": text(30),
        "a/b/crlf.txt": text(20).replace("\n", "\r\n"),
        "c/only.py": text(12),
        "c/empty.py": "",
        "d/e/f/g.py": text(8),
        "café.txt": text(6),
        "x y.txt": text(6),
        "caf\udce9.txt": text(6),
    }


def edit(rng: random.Random, text: str) -> str:
    """`text` with one to four lines changed, added or removed, and maybe its final newline toggled."""
    lines = text.split("\n")
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(lines) + 1)
        roll = rng.random()
        if roll < 0.4 and at < len(lines):
            lines[at] = rng.choice(WORDS) + " # changed"
        elif roll < 0.7:
            lines[at:at] = [rng.choice(WORDS) + " # added" for _ in range(rng.randint(1, 3))]
        elif at < len(lines):
            del lines[at : at + rng.randint(1, 3)]
    out = "\n".join(lines)
    if rng.random() < 0.15:
        out = out.rstrip("\n") if out.endswith("\n") else out + "\n"
    return out


def random_edits(rng: random.Random, files: dict[str, str]) -> dict[str, str | None]:
    """Edits to a few files: changed, created (maybe empty), deleted (None)."""
    edits: dict[str, str | None] = {}
    for _ in range(rng.randint(1, 3)):
        name = rng.choice(sorted(files))
        roll = rng.random()
        if roll < 0.65:
            edits[name] = edit(rng, files[name])
        elif roll < 0.85:
            folder = rng.choice(["", "a/", "a/b/", "new/", "c/"])
            edits[f"{folder}added{rng.randint(0, 99)}.py"] = rng.choice(["", "one\n", "one\ntwo\n"])
        else:
            edits[name] = None
    return edits


def synthetic_patches(rng: random.Random, files: dict[str, str]) -> Iterator[str]:
    """Patches made here rather than by git diff: overlapping hunks found again further on, hunks out of
    order, and deletions, on the synthetic tree's files."""
    text_files = [n for n, t in files.items() if t.count("\n") >= 8 and "\r" not in t]
    while True:
        name = rng.choice(text_files)
        lines = files[name].splitlines(keepends=True)
        i = rng.randrange(len(lines) - 5)
        header = f"diff --git a/{name} b/{name}\n--- a/{name}\n+++ b/{name}\n"
        first = Hunk(
            i + 1, 3, i + 1, 3, "\n", [" " + lines[i], "-" + lines[i + 1], "+X\n", " " + lines[i + 2]]
        )
        j = i + rng.choice([2, 3, 4])  # 2: shares a context line with the first hunk
        body = [
            " " + lines[j],
            "-" + lines[j + 1],
            "+Y\n",
            *([" " + lines[j + 2]] if j + 2 < len(lines) else []),
        ]
        second = Hunk(j + 1, 0, j + 1, 0, "\n", body)
        second.recount()
        hunks = [first, second] if rng.random() < 0.8 else [second, first]
        yield header + "".join(h.header() + "".join(h.body) for h in hunks)
        deleted = rng.choice(sorted(files))
        body = [f"-{line}" for line in files[deleted].splitlines(keepends=True)]
        if body and not body[-1].endswith("\n"):
            body[-1] += "\n"
            body.append(MARKER)
        hunk = Hunk(1, len(files[deleted].splitlines()), 0, 0, "\n", body)
        yield (
            f"diff --git a/{deleted} b/{deleted}\ndeleted file mode 100644\n--- a/{deleted}\n+++ /dev/null\n"
            + (hunk.header() + "".join(body) if body else "")
        )
