"""Patch checks and statistics, on diffs made by real git."""

from __future__ import annotations

import pytest

from grader.workspace import patches
from tests.conftest import FIX, RepoFactory


def test_stats_count_files_lines_and_kinds(repo: RepoFactory) -> None:
    diff = repo.patch(
        {**FIX, "tests/test_core.py": "def test_add():\n    pass\n", "new.py": "x = 1\n", "pkg/util.py": None}
    )
    stats = patches.stats(patches.validate(diff))
    assert sorted(stats.files) == ["new.py", "pkg/core.py", "pkg/util.py", "tests/test_core.py"]
    assert stats.files_touched == 4
    assert stats.new_files == ["new.py"]
    assert stats.deleted_files == ["pkg/util.py"]
    assert stats.test_files == ["tests/test_core.py"]
    assert stats.lines_added == 3  # core 1, test 1 (`pass`), new.py 1
    assert stats.lines_removed == 7  # core 1, util 2, test 4


def test_stats_see_renames_and_binaries(repo: RepoFactory) -> None:
    renamed = (
        "diff --git a/pkg/util.py b/pkg/helpers.py\nsimilarity index 100%\nrename from pkg/util.py\n"
        "rename to pkg/helpers.py\n"
    )
    assert patches.stats(patches.validate(renamed)).renamed_files == ["pkg/helpers.py"]
    binary = repo.patch({"logo.png": "\x89PNG\x00\x01\x02"}, binary=True)
    assert patches.stats(patches.validate(binary)).binary_files == ["logo.png"]


@pytest.mark.parametrize(
    ("diff", "message"),
    [
        ("--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", "absolute path"),
        ("--- a/../outside.txt\n+++ b/../outside.txt\n@@ -1 +1 @@\n-a\n+b\n", "climbs out"),
        (
            "diff --git a/x/../../y b/x/../../y\n--- a/x/../../y\n+++ b/x/../../y\n@@ -1 +1 @@\n-a\n+b\n",
            "climbs out",
        ),
        ("--- /dev/null\n+++ b/.git/hooks/post-commit\n@@ -0,0 +1 @@\n+touch pwned\n", "into .git"),
        ("--- /dev/null\n+++ b/sub/.GIT/config\n@@ -0,0 +1 @@\n+x\n", "into .git"),
        ("rename from a.py\nrename to ../a.py\n", "climbs out"),
    ],
)
def test_paths_outside_the_repository_are_refused(diff: str, message: str) -> None:
    with pytest.raises(patches.PatchError, match=message):
        patches.validate(diff)


@pytest.mark.parametrize("target", ["/etc/passwd", "../../etc/passwd", "../.."])
def test_symlinks_leaving_the_repository_are_refused(target: str) -> None:
    diff = (
        f"diff --git a/link b/link\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
        f"+++ b/link\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n"
    )
    with pytest.raises(patches.PatchError, match="symlink"):
        patches.validate(diff)


def test_symlink_inside_the_repository_is_fine() -> None:
    diff = (
        "diff --git a/docs/link b/docs/link\nnew file mode 120000\nindex 0000000..1111111\n--- /dev/null\n"
        "+++ b/docs/link\n@@ -0,0 +1 @@\n+../README.md\n\\ No newline at end of file\n"
    )
    patches.validate(diff)


def test_malformed_and_oversized_patches_are_refused() -> None:
    with pytest.raises(patches.PatchError, match="truncated"):
        patches.validate("--- a/x\n+++ b/x\n@@ -1,5 +1,5 @@\n-a\n+b\n")  # promises 5 lines, text ends
    with pytest.raises(patches.PatchError, match="truncated"):
        patches.validate("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n")  # cut inside the changed lines
    with pytest.raises(patches.PatchError, match="malformed"):
        patches.validate("--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n-a\n-b\n+c\n+d\n@@ -9 +9 @@\n")
    with pytest.raises(patches.PatchError, match="no file header"):
        patches.validate("this is not a diff\n")
    with pytest.raises(patches.PatchError, match="over the cap"):
        patches.validate("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+" + "b" * 200 + "\n", max_bytes=100)
    with pytest.raises(patches.PatchError, match="NUL"):
        patches.validate("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+\x00\n")


def test_miscounted_hunks_are_recounted() -> None:
    diff = "--- a/x\n+++ b/x\n@@ -1,1 +1,1 @@\n a\n-b\n+B\n c\n"
    stats = patches.stats(patches.validate(diff))
    assert (stats.lines_added, stats.lines_removed) == (1, 1)
    assert patches.recount(diff).splitlines()[2] == "@@ -1,3 +1,3 @@"


def test_a_form_feed_inside_a_line_is_no_line_end() -> None:
    diff = (
        "--- a/x\n+++ b/x\n@@ -1,4 +1,4 @@\n a\n \x0c\n-b\n+B\n c\n"  # a page break line, as old sources have
    )
    assert patches.recount(diff) == diff
    parsed = patches.validate(diff)
    assert [(h.source_length, h.target_length) for f in parsed for h in f] == [(4, 4)]


def test_lost_trailing_context_is_not_truncation() -> None:
    diff = "--- a/x\n+++ b/x\n@@ -1,4 +1,4 @@\n a\n-b\n+B\n c\n"  # the final blank context line was stripped
    stats = patches.stats(patches.validate(diff))
    assert (stats.lines_added, stats.lines_removed) == (1, 1)


def test_missing_final_newline_is_accepted(repo: RepoFactory) -> None:
    diff = repo.patch(FIX)
    assert patches.stats(patches.validate(diff.rstrip("\n"))) == patches.stats(patches.validate(diff))


def test_equivalence_ignores_whitespace_context_and_offsets(repo: RepoFactory) -> None:
    a = repo.patch(FIX)
    respaced = repo.patch({"pkg/core.py": FIX["pkg/core.py"].replace("return a + b", "return  a + b ")})
    more_context = repo.patch(FIX, context=10)
    different = repo.patch({"pkg/core.py": FIX["pkg/core.py"].replace("a + b", "b + a")})
    key = lambda diff: patches.equivalence_key(patches.parse(diff))  # noqa: E731
    assert more_context != a
    assert key(a) == key(respaced) == key(more_context)
    assert key(a) != key(different)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("tests/test_x.py", True),
        ("pkg/tests/helpers.py", True),
        ("test_x.py", True),
        ("x_test.go", True),
        ("conftest.py", True),
        ("pkg/testing.py", False),
        ("pkg/core.py", False),
        ("contest.py", False),
    ],
)
def test_is_test_path(path: str, expected: bool) -> None:
    assert patches.is_test_path(path) is expected
