"""The shared workspace, on real repositories: branches, apply chain, verification, isolation, cleanup."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from grader.workspace import bare, patches
from grader.workspace.mirrors import MirrorCache
from grader.workspace.workspace import BASE, Workspace, WorkspaceError, open_workspace
from tests.conftest import BASE_FILES, FIX, RepoFactory, run_git


def ws_git(workspace: Workspace, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={workspace.git_dir}", *args], capture_output=True, text=True, check=True
    ).stdout


def test_only_base_and_trajectory_refs_are_reachable(repo: RepoFactory, mirrors: MirrorCache) -> None:
    group = repo.group({"good": (repo.patch(FIX), True), "bad": (repo.patch({"README.md": "x\n"}), False)})
    # Upstream moves on after the base (the real fix lands, a tag appears): none of it may be reachable.
    (repo.path / "pkg/core.py").write_text(FIX["pkg/core.py"])
    run_git(repo.path, "commit", "--quiet", "-am", "upstream fix")
    run_git(repo.path, "tag", "v1.0")
    future = run_git(repo.path, "rev-parse", "HEAD").strip()
    with open_workspace(group, mirrors=mirrors) as ws:
        assert ws.refs() == ["refs/failing/bad", "refs/heads/base", "refs/heads/candidates/good"]
        assert ws_git(ws, "remote").strip() == ""
        assert ws_git(ws, "tag").strip() == ""
        reachable = set(ws_git(ws, "rev-list", "--all").split())
        assert future not in reachable
        assert reachable == {repo.base, ws.commit_of("good"), ws.candidates["bad"].commit}
        assert ws.gradable() == ["good"] and ws.targets() == [BASE, "good"]
        # Objects are borrowed from the mirror, not copied: the workspace holds only the new commits' objects.
        alternates = (ws.git_dir / "objects/info/alternates").read_text().strip()
        assert alternates == str(mirrors.path_for(str(repo.path)) / "objects")
        # The new objects are one pack, which git verifies, holding what the branches add to the base.
        (pack,) = (ws.git_dir / "objects/pack").glob("*.pack")
        listing = ws_git(ws, "verify-pack", "-v", str(pack)).splitlines()
        packed = {
            line.split()[0] for line in listing if line.split()[1:2] in (["blob"], ["tree"], ["commit"])
        }
        branches = [ws.commit_of("good"), ws.candidates["bad"].commit or ""]
        added = ws_git(ws, "rev-list", "--objects", *branches, "--not", repo.base).split("\n")
        assert packed == {line.split()[0] for line in added if line}
        assert len(packed) == 7  # 2 commits, 2 blobs, 3 trees
        ws_git(ws, "fsck", "--no-dangling")
        assert ws.read_file("good", "pkg/core.py").decode() == FIX["pkg/core.py"]
        assert ws.read_file(BASE, "pkg/core.py").decode() == BASE_FILES["pkg/core.py"]
        assert "+    return a + b" in ws.diff("good")


def test_commits_are_reproducible_and_the_mirror_is_reused(repo: RepoFactory, mirrors: MirrorCache) -> None:
    group = repo.group({"good": (repo.patch(FIX), True), "bad": ("", False)})
    commits = []
    for _ in range(2):
        with open_workspace(group, mirrors=mirrors) as ws:
            commits.append(ws.commit_of("good"))
    assert commits[0] == commits[1]
    assert len([p for p in mirrors.root.iterdir() if p.suffix == ".git"]) == 1


def test_workspace_is_removed_unless_kept(repo: RepoFactory, mirrors: MirrorCache, tmp_path: Path) -> None:
    group = repo.group({"good": (repo.patch(FIX), True), "bad": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        path = ws.path
        assert not (path / "worktrees").exists()  # no working tree until one is asked for
        tree = ws.worktree("good")
        assert (tree / "pkg/core.py").read_text() == FIX["pkg/core.py"]
    assert not path.exists()
    kept = tmp_path / "kept"
    with open_workspace(group, root=kept, keep=True, mirrors=mirrors):
        pass
    assert (kept / "repo.git").is_dir()


def test_empty_patch_is_the_base(repo: RepoFactory, mirrors: MirrorCache) -> None:
    group = repo.group({"noop": ("", True), "bad": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        assert ws.candidates["noop"].apply_method == "empty"
        assert ws.commit_of("noop") == repo.base


def test_apply_chain_plain_3way_whitespace_crlf_fuzz(make_repo, mirrors: MirrorCache) -> None:
    lines = [f"line {i}\n" for i in range(1, 21)]
    repo = make_repo({"f.txt": "".join(lines), "g.txt": "".join(lines)})
    edited = lines.copy()
    edited[9] = "LINE 10\n"
    plain = repo.patch({"f.txt": "".join(edited)})
    old_base = repo.base
    # The task's base moved a neighbouring line since the patch was made: plain fails, 3-way succeeds
    # because the patch's preimage blob is in the repository's history.
    moved = lines.copy()
    moved[7] = "line 8 (moved on)\n"
    (repo.path / "f.txt").write_text("".join(moved))
    run_git(repo.path, "commit", "--quiet", "-am", "move on")
    repo.base = run_git(repo.path, "rev-parse", "HEAD").strip()
    assert old_base != repo.base
    on_new_base = repo.patch({"f.txt": "".join(moved[:9] + ["LINE 10\n"] + moved[10:])})
    whitespace = on_new_base.replace(" line 9\n", " line   9\n")  # context rewritten with other spacing
    crlf = on_new_base.replace("\n", "\r\n")
    fuzzy = on_new_base.replace(" line 12\n", " line twelve\n")  # a context line that exists nowhere
    no_final_newline = on_new_base.rstrip("\n")
    group = repo.group(
        {
            "plain": (on_new_base, True),
            "3way": (plain, True),
            "whitespace": (whitespace, True),
            "crlf": (crlf, True),
            "fuzz": (fuzzy, True),
            "eof": (no_final_newline, True),
            "fail": ("", False),
        }
    )
    with open_workspace(group, mirrors=mirrors) as ws:
        methods = {tid: c.apply_method for tid, c in ws.candidates.items()}
        errors = {tid: c.error for tid, c in ws.candidates.items() if c.error}
        assert errors == {}
        assert methods["plain"] == "plain" and methods["eof"] == "plain"
        assert methods["3way"] == "3way"
        assert methods["whitespace"] == "whitespace"
        assert methods["crlf"] == "whitespace"
        assert methods["fuzz"].startswith("fuzz")
        expected = "".join(moved[:9] + ["LINE 10\n"] + moved[10:])
        for tid in ("plain", "3way", "whitespace", "crlf", "fuzz", "eof"):
            assert ws.read_file(tid, "f.txt").decode() == expected, tid
        # Every variant makes the same edit, so they form one equivalence class.
        assert ws.classes == [["plain", "3way", "whitespace", "crlf", "fuzz", "eof"]]


def test_miscounted_hunks_apply_by_recount(make_repo, mirrors: MirrorCache) -> None:
    lines = "".join(f"line {i}\n" for i in range(1, 21))
    repo = make_repo({"f.txt": lines, "g.txt": lines})
    both = repo.patch(
        {"f.txt": lines.replace("line 10\n", "LINE 10\n"), "g.txt": lines.replace("line 3\n", "x\n")}
    )
    first_header = re.search(r"@@ -\d+,\d+ \+\d+,\d+ @@", both).group(0)
    # The first file's hunk claims more lines than it has: git alone reads into the next file and fails.
    miscounted = both.replace(first_header, "@@ -7,12 +7,12 @@", 1)
    group = repo.group({"m": (miscounted, True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        assert ws.candidates["m"].error is None
        assert ws.candidates["m"].apply_method == "whitespace"
        assert ws.read_file("m", "f.txt").decode() == lines.replace("line 10\n", "LINE 10\n")
        assert ws.read_file("m", "g.txt").decode() == lines.replace("line 3\n", "x\n")


def test_a_move_is_the_same_with_or_without_rename_headers(repo: RepoFactory, mirrors: MirrorCache) -> None:
    moved = {"pkg/util.py": None, "pkg/helpers.py": BASE_FILES["pkg/util.py"] + "\n\nLIMIT = 3\n"}
    with_renames = repo.patch(moved)
    assert "rename from pkg/util.py" in with_renames
    run_git(repo.path, "config", "diff.renames", "false")
    without = repo.patch(moved)
    assert "rename from" not in without and "deleted file mode" in without
    group = repo.group({"renames": (with_renames, True), "no-renames": (without, True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        assert [ws.candidates[t].error for t in ("renames", "no-renames")] == [None, None]
        assert ws.classes == [["renames", "no-renames"]]


def test_equivalence_classes(repo: RepoFactory, mirrors: MirrorCache) -> None:
    fix = repo.patch(FIX)
    respaced = repo.patch({"pkg/core.py": FIX["pkg/core.py"].replace("return a + b", "return  a +  b")})
    other = repo.patch({"pkg/core.py": FIX["pkg/core.py"].replace("a + b", "b + a")})
    group = repo.group({"a": (fix, True), "b": (other, True), "c": (respaced, True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        assert ws.classes == [["a", "c"], ["b"]]
        assert [ws.candidates[t].patch_class for t in "abc"] == [0, 1, 0]


def test_verification_rejects_a_branch_that_differs_from_its_patch(
    repo: RepoFactory, mirrors: MirrorCache
) -> None:
    group = repo.group(
        {"a": (repo.patch(FIX), True), "b": (repo.patch({"README.md": "changed\n"}), True), "f": ("", False)}
    )
    with open_workspace(group, mirrors=mirrors) as ws:
        # Point a's candidate at b's commit, as a broken apply would, and verify again.
        ws.candidates["a"].commit = ws.candidates["b"].commit
        ws._verify()
        assert ws.candidates["a"].commit is None
        assert "branch diff differs from the patch" in (ws.candidates["a"].error or "")
        assert ws.candidates["b"].commit is not None


@pytest.mark.parametrize(
    ("make_patch", "error"),
    [
        (lambda r: r.patch(FIX)[:-40], "does not apply|invalid patch"),  # truncated mid-hunk
        (lambda r: "@@ -1 +1 @@\n-garbage\n+more garbage\n", "invalid patch|does not apply"),
        (lambda r: r.patch(FIX).replace("pkg/core.py", "../core.py"), "climbs out"),
        (
            lambda r: (
                r.patch(FIX).replace("a/pkg/core.py", "/etc/passwd").replace("b/pkg/core.py", "/etc/passwd")
            ),
            "absolute path",
        ),
        (
            lambda r: "--- /dev/null\n+++ b/.git/hooks/pre-commit\n@@ -0,0 +1 @@\n+touch /tmp/pwned\n",
            "into .git",
        ),
        (
            lambda r: (
                "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc\n"
            ),
            "symlink",
        ),
        (lambda r: r.patch({"pkg/core.py": "x = 1\n" * 500_000}), "over the cap"),
        (
            lambda r: (
                r.patch({"pkg/nope.py": "x\n"})
                .replace("new file mode 100644\n", "")
                .replace("--- /dev/null", "--- a/pkg/nope.py")
                .replace("@@ -0,0", "@@ -1,1")
            ),
            "does not apply|invalid",
        ),
        # A lone surrogate is valid JSON ("\\ud800") but no text git can be given (issue 25).
        (lambda r: r.patch(FIX).replace("a + b", "a + b  # \ud800"), "invalid patch: .*UTF-8"),
        (lambda r: r.patch(FIX).replace("pkg/core.py", "pkg/c\ud800re.py"), "invalid patch: .*UTF-8"),
    ],
    ids=[
        "truncated",
        "no-header",
        "dotdot",
        "absolute",
        "dot-git",
        "symlink-out",
        "huge",
        "missing-file",
        "lone-surrogate",
        "lone-surrogate-path",
    ],
)
def test_bad_patches_mark_only_their_trajectory(
    repo: RepoFactory, mirrors: MirrorCache, make_patch, error: str
) -> None:
    group = repo.group({"good": (repo.patch(FIX), True), "bad": (make_patch(repo), True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        assert ws.gradable() == ["good"]
        bad = ws.candidates["bad"]
        assert bad.commit is None and bad.apply_method is None
        assert bad.error is not None
        assert re.search(error, bad.error), bad.error
    assert not (repo.path.parent / "core.py").exists()


def test_binary_patch_applies(repo: RepoFactory, mirrors: MirrorCache) -> None:
    data = "".join(chr(i) for i in range(1, 256)) + "\x00"
    binary = repo.patch({"data.bin": data}, binary=True)
    group = repo.group({"bin": (binary, True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        assert ws.candidates["bin"].error is None
        assert ws.read_file("bin", "data.bin") == data.encode()
        assert ws.candidates["bin"].stats.binary_files == ["data.bin"]


def test_crlf_file_content_round_trips(make_repo, mirrors: MirrorCache) -> None:
    repo = make_repo({"win.txt": "one\r\ntwo\r\nthree\r\n"})
    diff = repo.patch({"win.txt": "one\r\nTWO\r\nthree\r\n"})
    group = repo.group({"a": (diff, True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        assert ws.candidates["a"].apply_method == "plain"
        assert ws.read_file("a", "win.txt") == b"one\r\nTWO\r\nthree\r\n"


def test_group_level_problems_raise_naming_the_group(
    repo: RepoFactory, mirrors: MirrorCache, tmp_path: Path
) -> None:
    group = repo.group({"a": (repo.patch(FIX), True), "f": ("", False)}, group_id="g-missing")
    missing_commit = group.model_copy(
        update={"task": group.task.model_copy(update={"base_commit": "f" * 40})}
    )
    with (
        pytest.raises(WorkspaceError, match=r"g-missing.*not in repository"),
        open_workspace(missing_commit, mirrors=mirrors),
    ):
        pass
    missing_repo = group.model_copy(
        update={"task": group.task.model_copy(update={"repo": str(tmp_path / "no")})}
    )
    with (
        pytest.raises(WorkspaceError, match=r"g-missing.*does not exist"),
        open_workspace(missing_repo, mirrors=mirrors),
    ):
        pass
    not_empty = tmp_path / "full"
    not_empty.mkdir()
    (not_empty / "x").write_text("x")
    with (
        pytest.raises(WorkspaceError, match="not empty"),
        open_workspace(group, root=not_empty, mirrors=mirrors),
    ):
        pass
    assert (not_empty / "x").exists()


def test_no_hook_filter_or_user_config_runs(
    repo: RepoFactory, mirrors: MirrorCache, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "pwned"
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("post-checkout", "pre-commit", "post-commit", "reference-transaction", "post-index-change"):
        (hooks / name).write_text(f"#!/bin/sh\necho {name} >> {marker}\n")
        (hooks / name).chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        f"[core]\n\thooksPath = {hooks}\n[filter \"evil\"]\n\tclean = sh -c 'echo clean >> {marker}; cat'\n"
        f"\tsmudge = sh -c 'echo smudge >> {marker}; cat'\n\trequired = true\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    attributes = repo.patch({".gitattributes": "* filter=evil\n", **FIX})
    group = repo.group({"a": (attributes, True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        assert ws.candidates["a"].error is None
        tree = ws.worktree("a")
        assert (tree / "pkg/core.py").read_text() == FIX["pkg/core.py"]
    assert not marker.exists(), marker.read_text()


def test_nothing_is_written_outside_the_workspace(
    repo: RepoFactory, mirrors: MirrorCache, tmp_path: Path
) -> None:
    escape = repo.patch({"x.txt": "payload\n"}).replace("x.txt", "../../escaped.txt")
    group = repo.group({"a": (repo.patch(FIX), True), "b": (escape, True), "f": ("", False)})
    root = tmp_path / "ws" / "inner"
    root.parent.mkdir()
    mirrors.mirror(str(repo.path), repo.base)
    before = set(os.listdir(tmp_path))
    with open_workspace(group, root=root, mirrors=mirrors) as ws:
        ws.worktree("a")
        assert ws.candidates["b"].error is not None
    bare.remover.drain()  # the workspace's content is deleted on a background thread: let it finish first
    assert set(os.listdir(tmp_path)) == before
    assert not list(tmp_path.rglob("escaped.txt"))


def test_verified_branch_diff_matches_patch(repo: RepoFactory, mirrors: MirrorCache) -> None:
    diff = repo.patch({**FIX, "pkg/new.py": "VALUE = 1\n", "pkg/util.py": None})
    group = repo.group({"a": (diff, True), "f": ("", False)})
    with open_workspace(group, mirrors=mirrors) as ws:
        assert patches.changes(patches.parse(ws.diff("a"))) == patches.changes(patches.parse(diff))
