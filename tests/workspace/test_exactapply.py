"""The in-process applier (grader.workspace.exactapply) against git itself: whatever tree it makes, `git apply
--cached`
+ `git write-tree` make too, on real repositories and `git diff` output, perturbed or not; what it declines,
git still applies (the workspace hands it over)."""

from __future__ import annotations

import random
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from grader.workspace import bare, exactapply, gitobjects
from grader.workspace.gitcmd import safe_env
from tests.conftest import BASE_FILES, FIX, RepoFactory, run_git
from tests.support.applier_fuzz_support import WORDS
from tests.support.applier_fuzz_support import edit as edit_lines


def _text(rng: random.Random, lines: int, crlf: bool = False, final_newline: bool = True) -> str:
    body = [rng.choice(WORDS) + rng.choice(["", "", " ", "  # é", "\x0c"]) for _ in range(lines)]
    end = "\r\n" if crlf else "\n"
    text = end.join(body) + end
    return text if final_newline else text[: -len(end)]


def base_files(rng: random.Random) -> dict[str, str]:
    files = {
        "README.md": "readme\n",
        "a/one.py": _text(rng, 40),
        "a/two.py": _text(rng, 25, final_newline=False),
        "a/b/deep.py": _text(rng, 30),
        "a/b/crlf.txt": _text(rng, 20, crlf=True),
        "c/only.py": _text(rng, 12),
        "c/empty.py": "",
        "d/e/f/g.py": _text(rng, 8),
        "tool.sh": "#!/bin/sh\necho hi\n",
    }
    return files


def random_edits(rng: random.Random, files: dict[str, str]) -> dict[str, str | None]:
    edits: dict[str, str | None] = {}
    names = [n for n in files if n != "tool.sh"]
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        name = rng.choice(names)
        if roll < 0.6:
            edits[name] = edit_lines(rng, files[name] if edits.get(name) is None else edits[name] or "")
        elif roll < 0.8:
            folder = rng.choice(["", "a/", "a/b/", "new/", "new/deeper/", "c/"])
            edits[f"{folder}added{rng.randint(0, 99)}.py"] = rng.choice(["", _text(rng, rng.randint(1, 9))])
        else:
            edits[name] = None
    if rng.random() < 0.1:  # a directory emptied: its tree must go
        edits |= {"c/only.py": None, "c/empty.py": None}
    return edits


def _perturb(rng: random.Random, patch: str) -> str:
    roll = rng.random()
    if roll < 0.4:  # a hunk moved: git may still find it at an offset

        def shift(m: re.Match[str]) -> str:
            return f"@@ -{m.group(1)} +{max(1, int(m.group(2)) + rng.choice([-2, -1, 1, 3]))}"

        return re.sub(r"@@ -(\d+(?:,\d+)?) \+(\d+)", shift, patch, count=1)
    if roll < 0.7:  # a context line that is not in the file
        lines = patch.split("\n")
        context = [i for i, line in enumerate(lines) if line.startswith(" ")]
        if context:
            lines[rng.choice(context)] = " not in the file"
        return "\n".join(lines)
    return patch.replace("\n", "\r\n") if roll < 0.8 else patch


def git_tree(repo: RepoFactory, patch: str, tmp: Path) -> str | None:
    """What git makes of the base with `patch` (None when git refuses it)."""
    env = safe_env({"GIT_INDEX_FILE": str(tmp / "git.index")})
    subprocess.run(["git", "read-tree", repo.base], cwd=repo.path, env=env, check=True)
    applied = subprocess.run(
        ["git", "apply", "--cached", "-"],
        cwd=repo.path,
        env=env,
        input=patch.encode("utf-8", "surrogateescape"),
        capture_output=True,
    )
    if applied.returncode != 0:
        return None
    return subprocess.run(
        ["git", "write-tree"], cwd=repo.path, env=env, capture_output=True, text=True
    ).stdout.strip()


def ours(repo: RepoFactory, patch: str, git_dir: Path, memo: gitobjects.BaseFiles) -> str:
    """The tree exactapply makes, its new objects written to `git_dir` as one pack, as a build does."""
    tree = run_git(repo.path, "rev-parse", "HEAD^{tree}").strip()
    buffer = gitobjects.ObjectBuffer()
    made = exactapply.apply_patch(patch, git_dir, tree, memo, buffer.add)
    buffer.flush(git_dir / "objects")
    return made


@pytest.mark.parametrize("seed", range(4))
def test_every_tree_it_makes_is_the_one_git_makes(make_repo, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    files = base_files(rng)
    repo = make_repo(files)
    run_git(repo.path, "update-index", "--chmod=+x", "tool.sh")
    run_git(repo.path, "commit", "--quiet", "--amend", "-a", "-m", "base")
    repo.base = run_git(repo.path, "rev-parse", "HEAD").strip()
    git_dir = tmp_path / "ws.git"
    bare.init_bare(git_dir, repo.path / ".git" / "objects", head="refs/heads/base")
    memo = gitobjects.BaseFiles()
    taken = exact = declined_exact = 0
    for case in range(40):
        context = rng.choice([1, 3, 3, 3, 5, 0])
        patch = repo.patch(random_edits(rng, files), context=context)
        if not patch:
            continue
        perturbed = case % 3 == 2
        if perturbed:
            patch = _perturb(rng, patch)
        expected = git_tree(repo, patch, tmp_path)
        try:
            got = ours(repo, patch, git_dir, memo)
        except exactapply.Declined as why:
            renamed = "\nrename from " in patch  # git diff found a move: a header this module leaves to git
            assert perturbed or context == 0 or renamed, (case, why, patch)
            declined_exact += not (perturbed or renamed) and context > 0
            continue
        taken += 1
        assert got == expected, (case, patch)
        exact += not perturbed
        # The tree is really in the workspace repository, readable by git, down to every file.
        listing = run_git(repo.path, "ls-tree", "-r", got) if expected else ""
        assert (
            subprocess.run(
                ["git", f"--git-dir={git_dir}", "ls-tree", "-r", got],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            == listing
        )
    assert exact >= 15 and declined_exact == 0  # unperturbed diffs with context are all taken in process
    assert taken > exact  # and some perturbed ones, where git's first try succeeds too


def test_a_zero_context_insertion_is_placed_where_git_places_it_or_declined(
    repo: RepoFactory, tmp_path: Path
) -> None:
    # git without --unidiff-zero puts a hunk without trailing context at the file's end, whatever its header
    # says.
    inserted = BASE_FILES["pkg/core.py"].replace("    return a - b", "    INSERTED\n    return a - b")
    patch = repo.patch({"pkg/core.py": inserted}, context=0)
    git_dir = tmp_path / "ws.git"
    bare.init_bare(git_dir, repo.path / ".git" / "objects", head="refs/heads/base")
    expected = git_tree(repo, patch, tmp_path)
    try:
        got = ours(repo, patch, git_dir, gitobjects.BaseFiles())
    except exactapply.Declined:
        return
    assert got == expected


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda p: p.replace("index ", "old mode 100644\nnew mode 100755\nindex ", 1), "extended header"),
        (
            lambda p: p.replace(
                "diff --git a/pkg/core.py b/pkg/core.py", "diff --git a/pkg/core.py b/pkg/other.py"
            ),
            "same plain path",
        ),
        (lambda p: p.replace("\n", "\r\n"), "same plain path"),
        (lambda p: "From 1234 Mon Sep 17 00:00:00 2001\nSubject: fix\n\n" + p, "outside a file's diff"),
        (lambda p: p + "-- \n2.39.0\n", "outside a file's diff"),
        (lambda p: re.sub(r"@@ -1,(\d+) \+1,(\d+) @@", "@@ -1,40 +1,40 @@", p), "counts"),
        (lambda p: p + p, "touched twice"),
        (
            lambda p: p.replace("a/pkg/core.py", "a/pkg/core.py\t").replace(
                "b/pkg/core.py", "b/pkg/core.py\t"
            ),
            "unusual characters|file names",
        ),
    ],
    ids=[
        "mode-change",
        "rename-like",
        "crlf-patch",
        "mail-preamble",
        "signature",
        "bad-counts",
        "twice",
        "tabs",
    ],
)
def test_what_it_declines_names_why(repo: RepoFactory, tmp_path: Path, edit, reason: str) -> None:
    patch = edit(repo.patch(FIX))
    with pytest.raises(exactapply.Declined, match=reason):
        exactapply.read_patch(patch)


def test_binary_symlink_and_offset_patches_are_declined_for_git(make_repo, tmp_path: Path) -> None:
    repo = make_repo({"data.bin": "a\0b", "text.py": "".join(f"line {i}\n" for i in range(30))})
    (repo.path / "link").symlink_to("text.py")
    run_git(repo.path, "add", "link")
    run_git(repo.path, "commit", "--quiet", "-m", "link")
    repo.base = run_git(repo.path, "rev-parse", "HEAD").strip()
    git_dir = tmp_path / "ws.git"
    bare.init_bare(git_dir, repo.path / ".git" / "objects", head="refs/heads/base")
    memo = gitobjects.BaseFiles()
    binary = repo.patch({"data.bin": "a\0c"}, binary=True)
    with pytest.raises(exactapply.Declined, match="extended header"):
        ours(repo, binary, git_dir, memo)
    (repo.path / "link").unlink()
    (repo.path / "link").symlink_to("other.py")
    run_git(repo.path, "add", "link")
    symlink = run_git(repo.path, "diff", "--cached")
    run_git(repo.path, "reset", "--quiet", "--hard", "HEAD")
    with pytest.raises(exactapply.Declined, match="extended header 'index .* 120000'"):
        ours(repo, symlink, git_dir, memo)
    with pytest.raises(exactapply.Declined, match="not a regular file"):  # even when the header hides it
        ours(repo, re.sub(r"(index \w+\.\.\w+) 120000", r"\1", symlink), git_dir, memo)
    shifted = repo.patch(
        {"text.py": "".join(f"line {i}\n" for i in range(30)).replace("line 20\n", "line XX\n")}
    )
    shifted = shifted.replace("+18,", "+16,")  # git finds it two lines on; the first try does not
    with pytest.raises(exactapply.Declined, match="not where its header says"):
        ours(repo, shifted, git_dir, memo)
    assert git_tree(repo, shifted, tmp_path) is not None


def test_a_file_under_a_submodule_is_declined(make_repo, tmp_path: Path) -> None:
    repo = make_repo({"README.md": "r\n"})
    # A submodule whose commit is not in this repository (the usual case): `tree:sub` reads as missing.
    run_git(repo.path, "update-index", "--add", "--cacheinfo", "160000," + "12" * 20 + ",sub")
    run_git(repo.path, "commit", "--quiet", "-m", "submodule")
    repo.base = run_git(repo.path, "rev-parse", "HEAD").strip()
    git_dir = tmp_path / "ws.git"
    bare.init_bare(git_dir, repo.path / ".git" / "objects", head="refs/heads/base")
    patch = (
        "diff --git a/sub/x.py b/sub/x.py\nnew file mode 100644\n--- /dev/null\n+++ b/sub/x.py\n"
        "@@ -0,0 +1 @@\n+x\n"
    )
    with pytest.raises(exactapply.Declined, match="not a directory in the base"):
        ours(repo, patch, git_dir, gitobjects.BaseFiles())


# -- hostile patches: one case per class a differential fuzz against git found (issue 25) --------------------

TEN_LINES = "".join(f"l{i}\n" for i in range(1, 11))
_F = "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n"
HOSTILE = {
    # Two hunks sharing the context line l4: git marks the lines a hunk wrote and refuses to match them again.
    "overlapping-hunks": _F
    + "@@ -1,4 +1,4 @@\n l1\n-l2\n+L2\n l3\n l4\n@@ -4,3 +4,3 @@\n l4\n-l5\n+L5\n l6\n",
    # Overlapping, and the second hunk's lines are found again further on: git moves it there.
    "overlapping-hunks-moved": "diff --git a/h.txt b/h.txt\n--- a/h.txt\n+++ b/h.txt\n"
    "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n@@ -3,2 +3,3 @@\n c\n+X\n a\n",
    # A no-newline marker needs a backslash and a space and at least 12 bytes: git ignores or refuses others.
    "marker-without-space": _F + "@@ -8,3 +8,3 @@\n l8\n l9\n-l10\n+L10\n\\x\n",
    "marker-too-short": _F + "@@ -1,3 +1,3 @@\n l1\n-l2\n+L2\n\\ x\n l3\n",
    "marker-after-blank-context": "diff --git a/g.txt b/g.txt\n--- a/g.txt\n+++ b/g.txt\n"
    "@@ -1,2 +1,2 @@\n-a\n+b\n\n\\ No newline at end of file\n",
    # git: "corrupt patch" for a hunk that changes nothing.
    "context-only-hunk": _F + "@@ -1,2 +1,2 @@\n l1\n l2\n",
    "empty-hunk": _F + "@@ -3,0 +3,0 @@\n",
    # str.isdigit and int() take other scripts' digits; git's isdigit does not.
    "arabic-indic-digits": _F + "@@ -\u0662,3 +\u0662,3 @@\n l2\n-l3\n+L3\n l4\n",
    # git: "deleted file still has contents" when a deletion's hunk has any new line, even an empty one.
    "deletion-keeping-an-empty-line": "diff --git a/f.txt b/f.txt\ndeleted file mode 100644\n--- a/f.txt\n"
    "+++ /dev/null\n@@ -1,10 +0,1 @@\n"
    + "".join(f"-l{i}\n" for i in range(1, 11))
    + "+\n\\ No newline at end of file\n",
    # git: "new file depends on old contents".
    "creation-with-old-lines": "diff --git a/n.txt b/n.txt\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/n.txt\n@@ -0,0 +1,1 @@\n+x\n@@ -1,1 +2,1 @@\n x\n",
    # git needs every line of a patch to end with a newline (the workspace adds it; the API does not).
    "no-final-newline": _F + "@@ -9,2 +9,2 @@\n l9\n-l10\n+L10",
    # Windows-reserved spellings of .git that git refuses (core.protectNTFS is on by default).
    "ntfs-dotgit": "diff --git a/git~1/x b/git~1/x\nnew file mode 100644\n--- /dev/null\n+++ b/git~1/x\n"
    "@@ -0,0 +1 @@\n+x\n",
    "trailing-dot-dotgit": "diff --git a/.git./x b/.git./x\nnew file mode 100644\n--- /dev/null\n"
    "+++ b/.git./x\n@@ -0,0 +1 @@\n+x\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_patch_is_declined_or_applied_exactly_as_git_does(
    make_repo, tmp_path: Path, name: str
) -> None:
    repo = make_repo({"f.txt": TEN_LINES, "g.txt": "a\n\n", "h.txt": "a\nb\nc\n" * 3})
    git_dir = tmp_path / "ws.git"
    bare.init_bare(git_dir, repo.path / ".git" / "objects", head="refs/heads/base")
    patch = HOSTILE[name]
    expected = git_tree(repo, patch, tmp_path)
    try:
        got = ours(repo, patch, git_dir, gitobjects.BaseFiles())
    except exactapply.Declined:
        return
    assert expected is not None, f"git refuses {name}, the in-process applier made {got}"
    assert got == expected


def _raw_tree(entries: list[tuple[str, str, str]]) -> bytes:
    """A tree object's body exactly as given (mode strings and order unchecked), as old tools wrote them."""
    return b"".join(f"{mode} {name}".encode() + b"\0" + bytes.fromhex(oid) for mode, name, oid in entries)


@pytest.mark.parametrize(
    "odd", ["100664 blob", "040000 tree", "100775 blob"], ids=["group-writable", "zero-padded-tree", "775"]
)
def test_a_base_tree_with_non_canonical_modes_is_declined_or_rewritten_as_git_does(
    make_repo, tmp_path: Path, odd: str
) -> None:
    # Trees written by old tools keep modes git no longer writes; git's index canonicalizes every entry of a
    # tree it rewrites, so copying them verbatim would make a tree id git never makes (or an unsorted tree).
    repo = make_repo({"f.txt": TEN_LINES, "d/x.txt": "x\n"})
    mode, kind = odd.split()
    blob = run_git(repo.path, "rev-parse", "HEAD:f.txt").strip()
    subtree = run_git(repo.path, "rev-parse", "HEAD:d").strip()
    odd_entry = (mode, "d", subtree) if kind == "tree" else (mode, "e.txt", blob)
    entries = sorted(
        [("100644", "f.txt", blob), odd_entry, ("100644", "d.txt", blob)],
        key=lambda e: e[1] + ("/" if e[2] == subtree else ""),
    )
    proc = subprocess.run(
        ["git", "hash-object", "-t", "tree", "--literally", "-w", "--stdin"],
        cwd=repo.path,
        input=_raw_tree(entries),
        capture_output=True,
        check=True,
    )
    root = proc.stdout.decode().strip()
    repo.base = run_git(repo.path, "commit-tree", root, "-m", "old tool").strip()
    git_dir = tmp_path / "ws.git"
    bare.init_bare(git_dir, repo.path / ".git" / "objects", head="refs/heads/base")
    patch = _F + "@@ -1,3 +1,3 @@\n l1\n-l2\n+L2\n l3\n"
    expected = git_tree(repo, patch, tmp_path)
    assert expected is not None
    buffer = gitobjects.ObjectBuffer()
    for _ in range(2):  # the second time the tree's check comes from the process's memo
        try:
            got = exactapply.apply_patch(patch, git_dir, root, gitobjects.BaseFiles(), buffer.add)
        except exactapply.Declined:
            continue
        buffer.flush(git_dir / "objects")
        assert got == expected


def test_a_path_that_is_not_utf8_is_declined_not_raised(make_repo, tmp_path: Path) -> None:
    # The patch as the workspace holds it: git's bytes decoded with surrogateescape (0xE9 is Latin-1 "é").
    repo = make_repo({"f.txt": TEN_LINES})
    git_dir = tmp_path / "ws.git"
    bare.init_bare(git_dir, repo.path / ".git" / "objects", head="refs/heads/base")
    name = "caf\udce9.txt"
    patch = (
        f"diff --git a/{name} b/{name}\nnew file mode 100644\n--- /dev/null\n+++ b/{name}\n"
        "@@ -0,0 +1 @@\n+x\n"
    )
    expected = git_tree(repo, patch, tmp_path)
    try:
        got = ours(repo, patch, git_dir, gitobjects.BaseFiles())
    except exactapply.Declined:
        got = None
    assert got in (None, expected)
    lone = patch.replace(name, "caf\ud800.txt")
    with pytest.raises(exactapply.Declined):
        ours(repo, lone, git_dir, gitobjects.BaseFiles())


def test_names_close_to_dot_git_are_still_applied_in_process(make_repo, tmp_path: Path) -> None:
    # Only what git refuses is declined: .github, .gitignore and git~2 are ordinary names.
    repo = make_repo({"README.md": "r\n"})
    patch = repo.patch({".github/ci.yml": "on: push\n", ".gitignore": "*.pyc\n", "git~2/x": "x\n"})
    git_dir = tmp_path / "ws.git"
    bare.init_bare(git_dir, repo.path / ".git" / "objects", head="refs/heads/base")
    assert ours(repo, patch, git_dir, gitobjects.BaseFiles()) == git_tree(repo, patch, tmp_path)


def test_base_trees_checked_by_threads_at_once_are_counted_once() -> None:
    """Threads that miss the same tree together each parse it; the cache keeps it once and counts it once,
    so its bound still holds two trees that fit (a double count evicted the first: the builds of a batch
    then parsed the base's trees again and again)."""
    cache = exactapply._CheckedTrees(max_entries=30_000)

    def tree(count: int, prefix: str) -> tuple[str, bytes]:
        entries = {f"{prefix}{i:06d}.py": gitobjects.Entry("100644", "a" * 40) for i in range(count)}
        body = gitobjects.serialize_tree(entries)
        return gitobjects.hash_object("tree", body), body

    (big, big_body), (small, small_body) = tree(20_000, "f"), tree(5_000, "g")
    switching = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch mid-parse, so they all miss the tree before one stores it
    try:
        gate = threading.Barrier(4)

        def check() -> int:
            gate.wait()
            return len(cache.get("", big, big_body))

        with ThreadPoolExecutor(4) as pool:
            assert list(pool.map(lambda _: check(), range(4))) == [20_000] * 4
    finally:
        sys.setswitchinterval(switching)
    assert len(cache.get("", small, small_body)) == 5_000
    assert list(cache._trees) == [big, small]  # both fit in 30,000 entries: neither was evicted
