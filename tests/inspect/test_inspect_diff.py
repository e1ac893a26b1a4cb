"""`gagar diff`: what distinguishes two candidates, from their patched trees and from the results."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.inspect.diff import compare
from grader.inspect.run import load_run
from tests.support.inspect_runs import GROUP, heuristic_run, inspect_cli

__all__ = ["heuristic_run"]


def test_two_equal_fixes_differ_only_in_whitespace(heuristic_run: Path) -> None:
    comparison = compare(load_run(heuristic_run), GROUP, "clean", "clean-respaced")
    assert comparison.only_a == [] and comparison.only_b == [] and comparison.shared == ["inventory/stock.py"]
    assert comparison.diff is not None
    assert "-    if not items:\n+    if  not items: \n" in comparison.diff  # the respacing, and nothing else
    assert "return 0.0" not in "".join(x for x in comparison.diff.splitlines(True) if x[:1] in "+-")


def test_files_only_one_candidate_touches(heuristic_run: Path) -> None:
    comparison = compare(load_run(heuristic_run), GROUP, "clean", "edits-tests")
    assert comparison.only_b == ["tests/test_stock.py"] and comparison.only_a == []
    assert comparison.diff == ""  # their fix of inventory/stock.py is the same
    assert "+    assert average_price([]) in (0, 0.0, None)" in comparison.only_diffs["edits-tests"]


def test_the_command_prints_both_candidates_side_by_side(heuristic_run: Path) -> None:
    proc = inspect_cli("diff", str(heuristic_run), GROUP, "leftover-script", "reformats-report")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b[" not in out
    assert out.startswith(f"{GROUP}: leftover-script vs reformats-report")
    rows = {line.split("│")[0].strip(): [c.strip() for c in line.split("│")[1:]] for line in out.splitlines()}
    assert rows["rank"] == ["2", "3"] and rows["weight"] == ["0.833", "0.667"]
    assert rows["fired"] == ["leftover_files", "out_of_scope_files, formatting_only_files"]
    assert rows["advantage after"] == ["+0.6099", "+0.4879"]
    assert "only leftover-script: reproduce.py" in out and "only reformats-report: inventory/report.py" in out
    assert "+print(average_price([]))" in out  # what leftover-script alone adds
    assert "+from inventory.stock import (" in out  # what reformats-report alone does
    assert "Shared files: reformats-report against leftover-script\n  identical in both" in out


def test_without_patches_it_still_compares_the_results(heuristic_run: Path, tmp_path: Path) -> None:
    shutil.copyfile(heuristic_run / "results.jsonl", tmp_path / "results.jsonl")
    comparison = compare(load_run(tmp_path), GROUP, "clean", "leftover-script")
    assert comparison.diff is None and comparison.note.startswith("patch not available")
    assert comparison.only_b == ["reproduce.py"]  # from the results' stats
    out = inspect_cli("diff", str(tmp_path), GROUP, "clean", "leftover-script").stdout
    assert "patch not available" in out and "only leftover-script: reproduce.py" in out


def test_a_failing_candidate_can_be_compared(heuristic_run: Path) -> None:
    comparison = compare(load_run(heuristic_run), GROUP, "clean", "wrong-value")
    assert comparison.diff is not None and "-        return 0.0\n+        return None" in comparison.diff


def test_unknown_ids_are_errors(heuristic_run: Path) -> None:
    with pytest.raises(ValueError, match="has no trajectory 'nope'"):
        compare(load_run(heuristic_run), GROUP, "clean", "nope")
    proc = inspect_cli("diff", str(heuristic_run), "no-group", "a", "b")
    assert proc.returncode == 2 and "has no group 'no-group'" in proc.stderr
