"""`gagar degrade`: variants of a clean patch that apply, still pass, and come with their reference order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grader.evaluation import cli
from grader.evaluation.degrade import KINDS, SEVERITY, DegradeError, degrade_file, degrade_group
from grader.groups.formats import load_group_file
from grader.workspace.workspace import open_workspace
from tests.conftest import EXAMPLE_GROUP, REPO_ROOT, RepoFactory

SHIPPED = REPO_ROOT / "examples" / "degraded"


@pytest.fixture(scope="module")
def example():
    (degradation,) = degrade_file(EXAMPLE_GROUP, "clean")
    return degradation


def test_every_kind_is_made_from_the_bundled_example(example) -> None:
    assert [v.kind for v in example.variants] == list(KINDS) and example.skipped == {}
    assert example.reference == [
        ["clean", "clean-respaced"],  # the clean patch's whitespace-equivalent class ties with it
        ["clean+reformat_unrelated", "clean+needless_refactor", "clean+dead_code"],
        ["clean+debug_output", "clean+leftover_script"],
        ["clean+swallowed_exception", "clean+test_edit"],
    ]
    ids = [t.id for t in example.group.trajectories]
    assert ids[:7] == [t.id for t in load_group_file(EXAMPLE_GROUP)[0].trajectories]  # originals kept
    failing = [t for t in example.group.trajectories if not t.passed]
    assert [t.id for t in failing] == ["wrong-value", "gave-up"]  # still a mixed group
    passing = [t.advantage for t in example.group.trajectories if t.passed]
    assert len(set(passing)) == 1 and passing[0] > 0 > failing[0].advantage  # GRPO over the larger group
    variant = example.group.trajectory("clean+debug_output")
    assert variant.metadata["degradation"] == "debug_output" and variant.metadata["derived_from"] == "clean"


def test_each_patch_is_a_real_diff_of_what_its_kind_says(example) -> None:
    patches = {v.kind: v.patch for v in example.variants}
    clean = example.group.trajectory("clean").patch
    assert patches["leftover_script"].startswith(clean) and "+++ b/reproduce.py" in patches["leftover_script"]
    assert '+    print("DEBUG average_price: items =", items)' in patches["debug_output"]
    assert "+    return sum(entry.price for entry in items) / len(items)" in patches["needless_refactor"]
    assert "+    # if not items:" in patches["dead_code"]
    assert "+    try:\n+        if not items:" in patches["swallowed_exception"]
    assert "+    except Exception:\n+        pass" in patches["swallowed_exception"]
    assert "+++ b/tests/test_stock.py" in patches["test_edit"]
    assert "+++ b/inventory/__init__.py" in patches["reformat_unrelated"]
    for patch in patches.values():
        assert patch.startswith("diff --git ") and "\nindex " in patch


def test_variants_apply_plainly_in_classes_of_their_own(example) -> None:
    with open_workspace(example.group) as workspace:
        classes = {workspace.candidates[t].patch_class for t in workspace.gradable()}
        methods = {workspace.candidates[v.trajectory_id].apply_method for v in example.variants}
    assert methods == {"plain"}
    assert len(classes) == 5 + len(KINDS) - 1  # clean-respaced joins clean's class


# The bundled example's tests are plain functions: calling them directly is pytest without its start-up cost.
RUN_TESTS = """
import pathlib, runpy
for path in sorted(pathlib.Path("tests").glob("test_*.py")):
    for name, test in runpy.run_path(str(path)).items():
        if name.startswith("test_") and callable(test):
            test()
"""


def test_variants_still_pass_the_tests(example) -> None:
    with open_workspace(example.group) as workspace:
        for v in example.variants:
            tree = workspace.worktree(v.trajectory_id)
            proc = subprocess.run(
                [sys.executable, "-c", RUN_TESTS],
                cwd=tree,
                env={**os.environ, "PYTHONPATH": str(tree)},
                capture_output=True,
                text=True,
            )
            assert proc.returncode == 0, f"{v.kind}: {proc.stderr[-500:]}"
        # And the runner does catch a failing tree: the failing trajectory's.
        tree = workspace.worktree("wrong-value")
        env = {**os.environ, "PYTHONPATH": str(tree)}
        failing = subprocess.run([sys.executable, "-c", RUN_TESTS], cwd=tree, env=env, capture_output=True)
        assert failing.returncode != 0 and b"AssertionError" in failing.stderr


def test_the_shipped_degraded_example_is_what_degrade_makes(tmp_path: Path) -> None:
    assert cli.main(["degrade", str(EXAMPLE_GROUP), "--clean", "clean", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "reference.json").read_text() == (SHIPPED / "reference.json").read_text()
    made, shipped = (
        [json.loads(line) for line in (folder / "groups.jsonl").read_text().splitlines()]
        for folder in (tmp_path, SHIPPED)
    )
    assert shipped[0]["task"].pop("repo") == "../inventory.bundle"  # relative: the folder ships with the repo
    made[0]["task"].pop("repo")
    assert made == shipped, "examples/degraded is stale: rerun gagar degrade (see the README)"
    (group,) = load_group_file(SHIPPED / "groups.jsonl")  # loads, with its repository found
    assert group.task.repo == str((REPO_ROOT / "examples" / "inventory.bundle").resolve())


def test_other_layouts_and_a_kind_that_does_not_apply(make_repo) -> None:
    files = {
        "src/shop/__init__.py": "",
        "src/shop/cart.py": (
            "class Cart:\n"
            "    def __init__(self):\n"
            "        self.lines = []\n\n"
            "    def total(self):\n"
            "        amount = 0\n"
            "        for price, qty in self.lines:\n"
            "            amount += price\n"
            "        return amount\n"
        ),
        "src/shop/util.py": "from decimal import Decimal, ROUND_HALF_UP\n\nCENT = Decimal('0.01')\n",
    }
    repo: RepoFactory = make_repo(files)
    fixed = files["src/shop/cart.py"].replace("amount += price\n", "amount += price * qty\n")
    group = repo.group({"gold": (repo.patch({"src/shop/cart.py": fixed}), True), "bad": ("", False)})
    result = degrade_group(group, "gold")
    made = {v.kind: v for v in result.variants}
    assert set(result.skipped) == {"test_edit"} and "no existing test file" in result.skipped["test_edit"]
    assert "from shop.cart import Cart" in made["leftover_script"].patch  # src/ layout, the enclosing class
    assert '+        print("DEBUG total: amount =", amount)' not in made["debug_output"].patch
    assert '+        print("DEBUG total")' in made["debug_output"].patch  # self only: prints a marker
    assert "renames amount to" in made["needless_refactor"].note
    assert "+++ b/src/shop/util.py" in made["reformat_unrelated"].patch
    assert "+            try:\n+                amount += price * qty" in made["swallowed_exception"].patch
    assert result.reference[-1] == ["gold+swallowed_exception"]  # test_edit's tier has only this one left
    assert all(SEVERITY[v.kind] for v in result.variants)


def test_bad_requests_are_refused() -> None:
    (group,) = load_group_file(EXAMPLE_GROUP)
    with pytest.raises(DegradeError, match="must be a passing"):
        degrade_group(group, "wrong-value")
    with pytest.raises(DegradeError, match="no trajectory"):
        degrade_group(group, "nope")
    with pytest.raises(DegradeError, match="unknown kinds"):
        degrade_group(group, "clean", kinds=["typo"])
    with pytest.raises(DegradeError, match="no group"):
        degrade_file(EXAMPLE_GROUP, "nope")
