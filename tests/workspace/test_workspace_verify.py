"""Verification keeps every patch git applies plainly, with exactly git's resulting tree."""

from __future__ import annotations

import random
import re
import subprocess

import pytest

from grader.workspace.mirrors import MirrorCache
from grader.workspace.workspace import open_workspace
from tests.conftest import FIX, run_git


def test_a_blank_line_deleted_and_readded_is_kept(make_repo, mirrors: MirrorCache) -> None:
    repo = make_repo({"f.txt": "a\nx\n\nb\n"})
    # The patch removes x and the blank line and adds y and a blank line; git's diff of the result pairs the
    # two blank lines as context, so it removes one line and adds one.
    patch = "--- a/f.txt\n+++ b/f.txt\n@@ -1,4 +1,4 @@\n a\n-x\n-\n+y\n+\n b\n"
    group = repo.group({"p": (patch, True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        c = ws.candidates["p"]
        assert c.error is None and c.commit is not None
        assert run_git(ws.git_dir, "show", f"{c.commit}:f.txt") == "a\ny\n\nb\n"


def _random_edit(rng: random.Random, lines: list[str], vocabulary: list[str]) -> str:
    """`lines` with one to four lines deleted or inserted at random, as one text."""
    edited = lines.copy()
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(edited))
        if rng.random() < 0.5:
            del edited[at]
        else:
            edited.insert(at, rng.choice(vocabulary) + "\n")
    return "".join(edited)


def _git_check(repo, patch: str) -> bool:
    """Whether `git apply --check` accepts `patch` at the base."""
    check = ["git", "-C", str(repo.path), "apply", "--check"]
    return subprocess.run(check, input=patch.encode(), capture_output=True).returncode == 0


def test_seeded_random_plain_patches_keep_gits_tree(make_repo, mirrors: MirrorCache) -> None:
    """Every patch `git apply --check` accepts at the base is kept, with exactly git's tree."""
    rng = random.Random(11)
    vocabulary = ["", "    ", "x", "y  ", "pass", "}", "return 1"]
    lines = [rng.choice(vocabulary) + "\n" for _ in range(60)]
    repo = make_repo({"f.txt": "".join(lines)})
    trajectories, expected = {}, {}
    for i in range(40):
        text = _random_edit(rng, lines, vocabulary)
        patch = repo.patch({"f.txt": text}, context=rng.randint(1, 3))
        assert _git_check(repo, patch)
        trajectories[f"t{i}"], expected[f"t{i}"] = (patch, True), text
    group = repo.group(trajectories)
    with open_workspace(group, mirrors=mirrors) as ws:
        for tid, text in expected.items():
            c = ws.candidates[tid]
            assert c.error is None, (tid, c.error)
            if text != "".join(lines):
                assert run_git(ws.git_dir, "show", f"{c.commit}:f.txt") == text


def _context_respaced(patch: str) -> str:
    """The patch with the whitespace of its context lines changed in amount (tabs, doubled spaces)."""
    out = []
    for line in patch.splitlines(keepends=True):
        if line.startswith(" ") and " " in line[1:]:
            body = line[1:].rstrip("\n")
            body = "\t" if not body.strip() else re.sub(r"( +)", r"\1 ", body)
            line = " " + body + "\n"
        out.append(line)
    return "".join(out)


def test_whitespace_apply_of_a_moved_blank_line_is_confirmed_and_recorded(
    make_repo, mirrors: MirrorCache
) -> None:
    # The context's indented line differs from the file in whitespace only, so only a tolerant apply places
    # it; the hunk deletes a blank line and re-adds an identical one further down.
    repo = make_repo({"f.py": "def f():\n    a = 1\n\n    b = 2\n    return a\n"})
    patch = "--- a/f.py\n+++ b/f.py\n@@ -1,5 +1,5 @@\n def f():\n \ta = 1\n-\n     b = 2\n+\n     return a\n"
    group = repo.group({"p": (patch, True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        c = ws.candidates["p"]
        assert c.error is None and c.apply_method == "whitespace", c.error
        assert (
            run_git(ws.git_dir, "show", f"{c.commit}:f.py")
            == "def f():\n    a = 1\n    b = 2\n\n    return a\n"
        )
        assert any("hunk 1: old lines matched the file only up to whitespace" in t for t in c.tolerated)


def test_whitespace_apply_of_a_block_with_trailing_and_blank_whitespace_is_kept_exactly(
    make_repo, mirrors: MirrorCache
) -> None:
    repo = make_repo({"g.py": "class G:\n    x = 1\n    y = 2\n"})
    block = (
        "    def h(self):   \n        \n        return 3  \n"  # trailing whitespace, a whitespace-only line
    )
    added = "".join("+" + line for line in block.splitlines(keepends=True))
    patch = f"--- a/g.py\n+++ b/g.py\n@@ -1,3 +1,6 @@\n class G:\n     x  = 1\n     y = 2\n{added}"
    group = repo.group({"p": (patch, True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        c = ws.candidates["p"]
        assert c.error is None and c.apply_method == "whitespace", c.error
        assert run_git(ws.git_dir, "show", f"{c.commit}:g.py") == "class G:\n    x = 1\n    y = 2\n" + block


def test_a_tolerant_apply_that_does_not_match_the_hunks_is_left_out(repo, mirrors: MirrorCache) -> None:
    respaced = _context_respaced(repo.patch(FIX))
    other = repo.patch({"README.md": "changed\n"})
    group = repo.group({"a": (respaced, True), "b": (other, True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        a = ws.candidates["a"]
        assert a.error is None and a.apply_method == "whitespace"
        a.commit = ws.candidates["b"].commit  # as a wrong tolerant apply would leave it
        a.tolerated = []
        ws._verify()
        assert a.commit is None and "not confirmed by an independent hunk applier" in (a.error or "")


def test_seeded_random_tolerant_patches_are_kept_with_gits_tree(make_repo, mirrors: MirrorCache) -> None:
    """Patches `git apply --check` refuses but `--ignore-whitespace` accepts are kept, with git's tree."""
    rng = random.Random(12)
    vocabulary = ["", "    ", "x", "y  ", "pass", "}", "return 1", "\tif a  and b:"]
    lines = [rng.choice(vocabulary) + "\n" for _ in range(60)]
    repo = make_repo({"f.txt": "".join(lines)})
    trajectories, expected = {}, {}
    for i in range(40):
        text = _random_edit(rng, lines, vocabulary)
        patch = _context_respaced(repo.patch({"f.txt": text}, context=rng.randint(1, 3)))
        if not _git_check(repo, patch):
            trajectories[f"t{i}"], expected[f"t{i}"] = (patch, True), text
    assert len(expected) >= 20  # most need the tolerant method
    group = repo.group(trajectories)
    with open_workspace(group, mirrors=mirrors) as ws:
        for tid, text in expected.items():
            c = ws.candidates[tid]
            assert c.error is None, (tid, c.error)
            assert c.apply_method in ("whitespace", "3way") and c.tolerated, (tid, c.apply_method)
            assert run_git(ws.git_dir, "show", f"{c.commit}:f.txt") == text


def _outer_context_changed(patch: str, rng: random.Random) -> str:
    """The patch with the first or last context line of each hunk rewritten, so that only fuzz places it."""
    hunks = re.split(r"(?m)^(?=@@ )", patch)
    out = [hunks[0]]
    for hunk in hunks[1:]:
        lines = hunk.splitlines(keepends=True)
        context = [i for i, line in enumerate(lines) if i and line.startswith(" ")]
        if context:
            at = context[0] if rng.random() < 0.5 else context[-1]
            if at in (1, len(lines) - 1):  # an outer line: fuzz may leave it unmatched
                lines[at] = " zzz changed context\n"
        out.append("".join(lines))
    return "".join(out)


def test_seeded_random_fuzzed_patches_are_kept_with_gits_tree(make_repo, mirrors: MirrorCache) -> None:
    """Patches whose outer context line no longer matches apply by fuzz; each is kept with git's tree."""
    rng = random.Random(13)
    vocabulary = ["a", "b", "c", "d", "pass", "return 1", "x = 1"]
    lines = [f"{rng.choice(vocabulary)} {n}\n" for n in range(80)]  # distinct lines: one place per hunk
    repo = make_repo({"f.txt": "".join(lines)})
    trajectories, expected = {}, {}
    for i in range(30):
        text = _random_edit(rng, lines, vocabulary)
        patch = _outer_context_changed(repo.patch({"f.txt": text}), rng)
        if not _git_check(repo, patch):
            trajectories[f"t{i}"], expected[f"t{i}"] = (patch, True), text
    assert len(expected) >= 15
    group = repo.group(trajectories)
    with open_workspace(group, mirrors=mirrors) as ws:
        for tid, text in expected.items():
            c = ws.candidates[tid]
            assert c.error is None, (tid, c.error)
            assert c.apply_method in ("fuzz1", "fuzz2") and any("left unmatched" in t for t in c.tolerated), (
                tid
            )
            assert run_git(ws.git_dir, "show", f"{c.commit}:f.txt") == text


def _git_tree_of(repo, patch: str) -> str:
    """The tree plain `git apply --cached` + `write-tree` make of the base with `patch` (git's bytes)."""
    index = repo.path / ".git" / "verify.index"
    env = {"GIT_INDEX_FILE": str(index)}
    subprocess.run(["git", "read-tree", repo.base], cwd=repo.path, env=env, check=True)
    raw = patch.encode("utf-8", "surrogateescape")
    subprocess.run(["git", "apply", "--cached", "-"], cwd=repo.path, env=env, input=raw, check=True)
    tree = subprocess.run(["git", "write-tree"], cwd=repo.path, env=env, capture_output=True, check=True)
    return tree.stdout.decode().strip()


# A name git quotes in its output (core.quotepath), one with a space and a quote, and one whose bytes are not
# UTF-8 (0xE9, Latin-1 "é"; Python holds it as the surrogate U+DCE9, as it holds any undecodable file name).
ODD_NAMES = ["café.txt", 'dir é/a "b".txt', "caf\udce9.txt"]


_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def _c_unquoted(quoted: str) -> str:
    """A name git C-quoted ("a\\303\\251"), as the bytes it stands for decoded with surrogateescape."""
    body, raw, at = quoted[1:-1], bytearray(), 0
    while at < len(body):
        if body[at] != "\\":
            raw += body[at].encode("utf-8", "surrogateescape")
            at += 1
        elif body[at + 1] in _C_ESCAPES:
            raw.append(_C_ESCAPES[body[at + 1]])
            at += 2
        else:
            raw.append(int(body[at + 1 : at + 4], 8))
            at += 4
    return raw.decode("utf-8", "surrogateescape")


def _without_quotes(patch: str) -> str:
    """`patch` with its quoted header names written raw, as `core.quotepath=false` or a person would."""
    quoted = re.compile(r'"(?:[^"\\]|\\.)*"')
    return "".join(
        quoted.sub(lambda m: _c_unquoted(m.group(0)), line)
        if line.startswith(("diff --git ", "--- ", "+++ "))
        else line
        for line in patch.splitlines(keepends=True)
    )


@pytest.mark.parametrize("quoted", [True, False], ids=["quoted", "raw"])
@pytest.mark.parametrize("name", ODD_NAMES, ids=["utf8", "space-quote", "latin1"])
def test_a_patch_to_an_unusual_path_is_kept_with_gits_tree(
    make_repo, mirrors: MirrorCache, name: str, quoted: bool
) -> None:
    repo = make_repo({name: "one\ntwo\n", "new dir/keep.txt": "k\n"})
    patch = repo.patch({name: "one\n2\n", f"{name}.new": "x\n", "new dir/é.txt": "y\n"})
    assert patch.startswith('diff --git "a/')  # git's own output quotes each of these names
    if not quoted:
        patch = _without_quotes(patch)
    expected = _git_tree_of(repo, patch)
    group = repo.group({"t": (patch, True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        c = ws.candidates["t"]
        assert c.error is None and c.commit is not None, c.error
        assert run_git(ws.git_dir, "rev-parse", f"{c.commit}^{{tree}}").strip() == expected
