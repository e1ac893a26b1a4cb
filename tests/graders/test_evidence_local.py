"""The evidence stage on a real tiny repository in the local sandbox: snippets run as a REPL would, tests run
with the task's runner, candidates are clustered and the heuristic ranks by what ran (seconds, no Docker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.graders.evidence import OutcomeCache
from grader.graders.evidence.run import plan
from grader.graders.heuristic import HeuristicGrader
from grader.sandbox import local as local_backend
from grader.workspace.mirrors import MirrorCache
from grader.workspace.workspace import open_workspace
from tests.conftest import BASE_FILES, FIX, RepoFactory

WHY_NOT = [local_backend.available(level) for level in ("bubblewrap", "namespaces")]
pytestmark = pytest.mark.skipif(all(WHY_NOT), reason=f"no local sandbox here: {WHY_NOT}")

STATEMENT = """`add` subtracts:

```python
>>> from pkg.core import add
>>> add(1, 2)
3
```
"""
WRONG = {"pkg/core.py": BASE_FILES["pkg/core.py"].replace("a - b", "abs(a - b)")}
"""Changes the statement's output (1 instead of -1) but not to the right value, and breaks no test it runs."""
ALSO_RIGHT = {"pkg/core.py": BASE_FILES["pkg/core.py"].replace("return a - b", "return b + a")}
BREAKS_MUL = {**FIX, "pkg/core.py": FIX["pkg/core.py"].replace("a * b", "a ** b")}


def _grade(repo: RepoFactory, mirrors: MirrorCache, tmp_path: Path, candidates: dict):
    patches = {tid: (repo.patch(edits), True) for tid, edits in candidates.items()}
    group = repo.group(patches)
    task = group.task.model_copy(
        update={
            "statement": STATEMENT,
            "python": "3",
            "test_command": "python -m unittest -v tests/test_core.py",
        }
    )
    group = group.model_copy(update={"task": task})
    grader = HeuristicGrader(evidence_sandbox="local", evidence_budget=120)
    grader.outcome_cache = OutcomeCache(tmp_path / "evidence")
    grader.progress = None
    with open_workspace(group, mirrors=mirrors) as ws:
        view = ws.view()
        return plan(view, [m[0] for m in view.classes]), grader.grade(view)


def test_the_stage_ranks_by_what_ran(make_repo, mirrors: MirrorCache, tmp_path: Path) -> None:
    files = dict(BASE_FILES)
    files["tests/test_core.py"] = (
        "import unittest\n\nfrom pkg.core import mul\n\n\nclass MulTest(unittest.TestCase):\n"
        "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n"
    )
    repo = make_repo(files)
    probes, grade = _grade(
        repo,
        mirrors,
        tmp_path,
        {
            "right": FIX,
            "also-right": ALSO_RIGHT,
            "wrong": WRONG,
            "breaks-mul": BREAKS_MUL,
            "same": {"README.md": "x\n"},
        },
    )
    assert [p.name for p in probes] == ["s1", "tests"]
    evidence = grade.details["evidence"]
    assert not evidence["skipped"], evidence
    assert evidence["outcomes"]["s1"]["right"] == "ok" and evidence["outcomes"]["s1"]["same"] == "ok"
    signals = {tid: grade.signals[tid].get("execution", {}) for tid in grade.signals}
    assert signals["right"] == {} and signals["also-right"] == {}
    assert signals["wrong"] == {"minority": 1}
    assert signals["same"] == {"unchanged": 1}
    assert signals["breaks-mul"] == {"regressions": 1}, (evidence["notes"], evidence["outcomes"])
    order = [tid for tier in grade.ranking for tid in tier]
    assert order[0] == "right", grade.ranking
    assert all(order.index("also-right") < order.index(bad) for bad in ("wrong", "same", "breaks-mul")), order
    assert "right also-right breaks-mul | wrong" in grade.details["evidence_table"]
