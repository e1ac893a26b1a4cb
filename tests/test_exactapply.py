"""The in-process applier (grader.exactapply) against git itself: whatever tree it makes, `git apply --cached`
+ `git write-tree` make too, on real repositories and `git diff` output, perturbed or not; what it declines,
git still applies (the workspace hands it over)."""

from __future__ import annotations

import random
import re
import subprocess
from pathlib import Path

import pytest

from grader import bare, exactapply, gitobjects
from grader.gitcmd import safe_env
from tests.conftest import BASE_FILES, FIX, RepoFactory, run_git

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


def _edit(rng: random.Random, text: str) -> str:
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
    if rng.random() < 0.15:  # the final newline comes or goes
        out = out.rstrip("\n") if out.endswith("\n") else out + "\n"
    return out


def random_edits(rng: random.Random, files: dict[str, str]) -> dict[str, str | None]:
    edits: dict[str, str | None] = {}
    names = [n for n in files if n != "tool.sh"]
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        name = rng.choice(names)
        if roll < 0.6:
            edits[name] = _edit(rng, files[name] if edits.get(name) is None else edits[name] or "")
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
        ["git", "apply", "--cached", "-"], cwd=repo.path, env=env, input=patch.encode(), capture_output=True
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
