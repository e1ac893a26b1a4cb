"""The independent hunk applier (`grader.workspace.hunks`) on its own: placement, tolerances and refusals."""

from __future__ import annotations

import pytest

from grader.errors import PatchError
from grader.workspace.hunks import apply_file, split_lines
from grader.workspace.patches import parse

BASE = "".join(f"line {n}\n" for n in range(1, 21))


def _one(patch: str):
    return parse(patch)[0]


def test_split_lines_cuts_only_at_newlines() -> None:
    assert split_lines("a\x0cb\r\nc\n\nd") == ["a\x0cb\r\n", "c\n", "\n", "d"]


def test_a_hunk_lands_at_its_offset_and_only_removed_and_added_lines_change() -> None:
    patch = "--- a/f\n+++ b/f\n@@ -3,3 +3,3 @@\n line 10\n-line 11\n+eleven\n line 12\n"
    text, tolerated = apply_file(BASE, _one(patch))
    assert text == BASE.replace("line 11\n", "eleven\n") and tolerated == []


def test_context_that_differs_in_whitespace_keeps_the_files_lines() -> None:
    base = "def f():\n    a = 1\n    b = 2\n"
    patch = "--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n def f():\n \ta  =  1\n-    b = 2\n+    b = 3\n"
    text, tolerated = apply_file(base, _one(patch))
    assert text == "def f():\n    a = 1\n    b = 3\n"
    assert tolerated == ["hunk 1: old lines matched the file only up to whitespace"]
    with pytest.raises(PatchError):  # "a=1" is not "a = 1": whitespace may change in amount, not appear
        apply_file(base, _one(patch.replace("\ta  =  1", "a=1")))


def test_fuzz_leaves_outer_context_unmatched_only_when_allowed() -> None:
    patch = "--- a/f\n+++ b/f\n@@ -4,5 +4,5 @@\n changed\n line 5\n-line 6\n+six\n line 7\n line 8\n"
    with pytest.raises(PatchError, match="not in the file"):
        apply_file(BASE, _one(patch))
    text, tolerated = apply_file(BASE, _one(patch), max_fuzz=1)
    assert text == BASE.replace("line 6\n", "six\n")
    assert tolerated == ["hunk 1: 1 context line(s) left unmatched"]


def test_missing_final_newlines_are_kept_as_the_patch_says() -> None:
    base = "a\nb"
    patch = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
    assert apply_file(base, _one(patch)) == ("a\nc\n", [])


def test_new_and_deleted_files() -> None:
    created = "--- /dev/null\n+++ b/g\n@@ -0,0 +1,2 @@\n+x\n+y\n"
    assert apply_file(None, _one(created)) == ("x\ny\n", [])
    deleted = "--- a/g\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-x\n-y\n"
    assert apply_file("x\ny\n", _one(deleted)) == (None, [])
