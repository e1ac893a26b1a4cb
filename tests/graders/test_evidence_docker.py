"""The evidence stage end to end on a real benchmark instance, in Docker and the instance's environment.

pytest-dev__pytest-7490 (swebench-lite, dev split): the statement shows a test file that adds an xfail marker
at run time and the `pytest -rsx test_foo.py` that runs it. On base the test fails; a resolved patch makes it
xfail; an unresolved one (published unresolved by its report) leaves it failing, exactly as base does. The
stage must find that on its own: the probe comes from the statement, the environment from the task's recipe.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.evaluation.benchmark import load_benchmark
from grader.graders.evidence import OutcomeCache, render_table
from grader.graders.heuristic import HeuristicGrader
from grader.sandbox.environments import environment_for, spec_for_task
from grader.util.cachedirs import machine_cache
from grader.workspace.mirrors import MirrorCache
from grader.workspace.workspace import open_workspace
from tests.support.conftest_sandbox import docker_marks

pytestmark = [*docker_marks(), pytest.mark.usefixtures("sandbox_images")]

GROUP = "pytest-dev__pytest-7490"
RESOLVED = "moatless-20240617_moatless_gpt-4o-2024-05-13"
UNRESOLVED = "acr-run-1"


USER_CACHE = machine_cache()
"""The test session moves $GAGAR_CACHE to a temporary folder; the prepared benchmark and its mirrors are in
the user's own cache (`gagar bench prepare` writes there), read here and never written."""


def _group():
    track = USER_CACHE / "benchmarks" / "swebench-lite" / "verification"
    if not (track / "benchmark.json").exists():
        pytest.skip(f"swebench-lite is not prepared here ({track}): gagar bench prepare swebench-lite")
    bench = load_benchmark(track)
    group = bench.groups[GROUP]
    kept = [t for t in group.trajectories if t.id in (RESOLVED, UNRESOLVED)]
    assert [t.id for t in kept] == [UNRESOLVED, RESOLVED] or [t.id for t in kept] == [RESOLVED, UNRESOLVED]
    return group.model_copy(update={"trajectories": kept})


def test_a_statement_probe_separates_a_resolved_patch_from_an_unresolved_one(tmp_path: Path) -> None:
    grader = HeuristicGrader(evidence_budget=900)
    grader.outcome_cache = OutcomeCache(tmp_path / "evidence")  # run for real, not from the user's cache
    lines: list[str] = []
    grader.progress = lines.append
    mirrors = MirrorCache(USER_CACHE / "mirrors")
    with open_workspace(_group(), mirrors=mirrors) as workspace:
        view = workspace.view()
        # The stage runs only in a layer already built (an unbuilt one is skipped, named): build it first.
        task = view.task
        environment_for(view, spec_for_task(task.repo, task.python, task.environment))
        evidence = grader.gather_evidence(view)
        grade = grader.grade(view)
    assert not evidence.skipped, evidence.skipped
    s1 = evidence.outcomes["s1"]
    assert s1["base"].status == "failed" and "1 failed" in s1["base"].output
    assert s1[RESOLVED].status == "ok" and "xfailed" in s1[RESOLVED].output
    assert s1[UNRESOLVED].behaviour() == s1["base"].behaviour()
    assert grade.ranking[0] == [RESOLVED]
    assert grade.signals[UNRESOLVED]["execution"]["unchanged"] >= 1
    assert "behaves as base where others changed (s1" in grade.rationales[UNRESOLVED]
    table = render_table(evidence)
    assert "pytest -rsx test_foo.py" in table and "= base" in table
    assert any(line.startswith(f"{GROUP}: s1 on 3 targets") for line in lines)
    assert evidence.cached == 0 and evidence.ran >= 3
    # A second grading reads every outcome from the cache and runs nothing.
    with open_workspace(_group(), mirrors=mirrors) as workspace:
        again = grader.gather_evidence(workspace.view())
    assert again.ran == 0 and again.cached == evidence.ran


def test_a_layer_not_built_yet_skips_the_stage_instead_of_building_it(repo, mirrors) -> None:
    from grader.workspace.workspace import open_workspace as open_ws
    from tests.conftest import FIX

    group = repo.group({"a": (repo.patch(FIX), True), "b": (repo.patch({"README.md": "b\n"}), True)})
    recipe = {"repo": "gagar-tests/evidence-never-built", "version": "0", "pip_packages": ["six==1.16.0"]}
    group = group.model_copy(
        update={"task": group.task.model_copy(update={"python": "3.9", "environment": recipe})}
    )
    grader = HeuristicGrader()
    grader.progress = None
    with open_ws(group, mirrors=mirrors) as workspace:
        grade = grader.grade(workspace.view())
    assert grade.details["evidence"]["skipped"] == (
        "its environment layer gagar/env:gagar-tests__evidence-never-built-0-py3.9 is not built yet "
        "(gagar env build GROUPS builds it)"
    )
