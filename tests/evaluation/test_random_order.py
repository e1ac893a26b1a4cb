"""benchmarks/tools/random_order.py: what a random order of a run's own tiers scores, as gagar eval scores."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from grader.groups.models import GroupResult
from tests.conftest import REPO_ROOT

TOOL = REPO_ROOT / "benchmarks/tools/random_order.py"


def run_tool(results: Path, reference: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), str(results), "--reference", str(reference), *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )


def test_a_run_is_placed_among_random_orders_of_its_tiers(tmp_path: Path) -> None:
    results = [
        GroupResult(group_id="g", status="graded", grader="llm", ranking=[["a"], ["b"], ["c"]]),
        GroupResult(group_id="h", status="graded", grader="llm", ranking=[["x", "y"]]),
        GroupResult(group_id="lost", status="failed", reason="no valid ranking", grader="llm"),
    ]
    (tmp_path / "results.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in results))
    pairs = [("g", "a", "b"), ("g", "a", "c"), ("g", "b", "c"), ("h", "x", "y"), ("lost", "p", "q")]
    (tmp_path / "ref.jsonl").write_text(
        "".join(
            json.dumps(
                {"group_id": g, "better": b, "worse": w, **({"category": "behaviour"} if g == "g" else {})}
            )
            + "\n"
            for g, b, w in pairs
        )
    )
    proc = run_tool(tmp_path / "results.jsonl", tmp_path / "ref.jsonl", "--draws", "3000")
    assert proc.returncode == 0, proc.stderr
    # g's order is right on its 3 pairs, h's tie earns half: 3.5 of 4. A random order of g's three tiers is
    # right on all three pairs once in 6 orders; h's one tier stays a tie. The failed group is not scored.
    assert "2 graded groups, 4 scored pairs; 3000 random orders of each ranking's tiers:" in proc.stdout
    found = re.search(
        r"all: the run scores 0\.875; a random order (0\.\d+) on average, 95% of draws in "
        r"\[(0\.\d+), (\d\.\d+)\], (\d+\.\d)% of draws at least 0\.875",
        proc.stdout,
    )
    assert found, proc.stdout
    mean, low, high, share = (float(x) for x in found.groups())
    assert abs(mean - 0.5) < 0.03 and low == 0.125 and high == 0.875
    assert 13.0 < share < 20.5  # 1 in 6
    # Only g's pairs carry a category: scored alone, a random order gets all three right once in 6 orders.
    assert re.search(
        r"^behaviour: the run scores 1\.000; .* \[0\.000, 1\.000\], 1\d\.\d% of draws", proc.stdout, re.M
    )


def test_a_run_without_a_scored_group_says_so(tmp_path: Path) -> None:
    result = GroupResult(group_id="g", status="graded", grader="llm", ranking=[["a"], ["b"]])
    (tmp_path / "results.jsonl").write_text(result.model_dump_json() + "\n")
    (tmp_path / "ref.jsonl").write_text(json.dumps({"group_id": "other", "better": "a", "worse": "b"}) + "\n")
    proc = run_tool(tmp_path / "results.jsonl", tmp_path / "ref.jsonl")
    assert proc.returncode == 1
    assert "no graded group has a reference" in proc.stderr
