"""RayGrader on a local Ray cluster: streaming, an actor dying, the deadline, the CLI."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from grader.graders.heuristic import HeuristicGrader
from grader.groups.formats import LoadFailure, load_group_file
from grader.groups.models import Group, GroupResult
from tests.conftest import EXAMPLE_GROUP, run_gagar

ray = pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'gagar[ray]')")
from grader.groups.outcomes import Outcome  # noqa: E402
from grader.integrations.ray import RayGrader  # noqa: E402

# Workers cannot import this test module by name: ship its classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module", autouse=True)
def local_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def copies(*ids: str) -> list[Group]:
    (group,) = load_group_file(EXAMPLE_GROUP)
    return [group.model_copy(update={"group_id": gid}) for gid in ids]


class Misbehaving(HeuristicGrader):
    """Dies, or dawdles, on chosen groups; otherwise the heuristic grader. `marker`: die only once."""

    def __init__(self, die: str = "", slow: str = "", marker: str = "") -> None:
        self.die, self.slow, self.marker = die, slow, marker

    def grade(self, workspace):
        gid = workspace.group_id
        if gid == self.die and not (self.marker and os.path.exists(self.marker)):
            if self.marker:
                Path(self.marker).write_text("died once")
            os._exit(1)  # the actor process dies mid-grading
        if gid == self.slow:
            time.sleep(30)
        return super().grade(workspace)


def test_groups_spread_over_actors_stream_back() -> None:
    grader = RayGrader(actors=2, per_actor=2)
    items = [*copies("a", "b", "c", "d"), LoadFailure("x.jsonl:9", "broken", "invalid JSON")]
    streamed = list(grader.grade_indexed(items))
    assert sorted(i for i, _ in streamed) == [0, 1, 2, 3, 4]
    by_id = {r.group_id: r for _, r in streamed}
    assert all(by_id[g].status == "graded" for g in "abcd")
    assert by_id["broken"].status == "failed" and "invalid JSON" in by_id["broken"].reason
    assert by_id["a"].ranking[0] == ["clean", "clean-respaced"]
    grader.shutdown()


def test_an_actor_dying_is_retried_elsewhere_then_fails(tmp_path: Path) -> None:
    marker = str(tmp_path / "died")
    once = RayGrader(grader_factory=lambda: Misbehaving(die="b", marker=marker), actors=2, retries=1)
    results = {r.group_id: r for r in once.grade(copies("a", "b", "c"))}
    assert Path(marker).exists()  # it did die once...
    assert all(r.status == "graded" for r in results.values())  # ...and was graded on another actor
    once.shutdown()

    always = RayGrader(grader_factory=lambda: Misbehaving(die="b"), actors=2, retries=1)
    results = {r.group_id: r for r in always.grade(copies("a", "b", "c"))}
    assert results["a"].status == results["c"].status == "graded"
    assert results["b"].status == "failed" and "actor died while grading (2 attempts)" in results["b"].reason
    assert results["b"].advantages_after == results["b"].advantages_before
    always.shutdown()


def test_the_deadline_never_holds_the_trainer() -> None:
    grader = RayGrader(grader_factory=lambda: Misbehaving(slow="slow"), actors=2, deadline=8.0)
    start = time.monotonic()
    results = {r.group_id: r for r in grader.grade(copies("a", "slow", "b"))}
    assert time.monotonic() - start < 15
    assert results["a"].status == results["b"].status == "graded"
    late = results["slow"]
    assert late.status == "failed" and late.reason.startswith("deadline: not graded within 8s")
    assert late.advantages_after == late.advantages_before
    grader.shutdown()


def test_cli_grades_through_ray(tmp_path: Path) -> None:
    ray.shutdown()  # the CLI starts its own local cluster
    try:
        proc = run_gagar("grade", str(EXAMPLE_GROUP), "--out", str(tmp_path), "--ray", "--workers", "1")
    finally:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "results.jsonl").read_text())
    assert result["status"] == "graded" and result["ranking"][0] == ["clean", "clean-respaced"]


def trainer_rows(group: Group) -> list[dict[str, object]]:
    """A trainer's rows for `group`, with the default row mapping's field names."""
    task = {"repo": group.task.repo, "base_commit": group.task.base_commit}
    return [
        {"group_id": group.group_id, "trajectory_id": t.id, "passed": t.passed, "patch": t.patch, **task}
        for t in group.trajectories
    ]


def test_batch_grader_through_ray_a_dead_actor_costs_its_group_only() -> None:
    from grader.integrations.batch import BatchGrader

    remote = RayGrader(grader_factory=lambda: Misbehaving(die="b", slow="slow"), actors=2, retries=0)
    batch = BatchGrader(ray_grader=remote)
    rows = [row for group in copies("a", "b", "slow") for row in trainer_rows(group)]
    assert batch.submit(rows) == 3
    start = time.monotonic()
    step = batch.weights(rows, deadline=6.0)
    assert time.monotonic() - start < 9
    outcome = {row["group_id"]: o for row, o in zip(rows, step.outcomes, strict=True)}
    assert outcome == {"a": Outcome.GRADED, "b": Outcome.ACTOR_DIED, "slow": Outcome.DEADLINE}
    assert all(isinstance(o, Outcome) for o in step.outcomes)
    assert step.metrics["gagar/late"] == pytest.approx(1 / 3)  # a Ray deadline is late too
    assert step.group_reasons["b"].startswith("failed: actor died while grading (1 attempts)")
    assert step.metrics["gagar/failed/actor_died"] == pytest.approx(1 / 3)
    weights = {(r["group_id"], r["trajectory_id"]): w for r, w in zip(rows, step.weights, strict=True)}
    assert weights[("a", "edits-tests")] < 1.0 == weights[("b", "edits-tests")] == weights[("slow", "clean")]
    remote.shutdown()


def test_results_do_not_depend_on_order_cache_or_ray(make_repo, tmp_path: Path) -> None:
    """A batch with single-passing groups whose base is missing from a local repository (a directory and a
    bundle), next to graded groups of the same repositories: in-process (a cold then a warm mirror cache)
    and on Ray, in both orders, every result is the same bytes (but for the time it took)."""
    from grader.pipeline import GradingOptions, grade_groups
    from grader.workspace.mirrors import MirrorCache
    from tests.conftest import BASE_FILES, FIX, run_git

    folder = make_repo(BASE_FILES)
    bundle = tmp_path / "repo.bundle"
    run_git(folder.path, "bundle", "create", str(bundle), "--all")
    missing = "0" * 40
    fix, nothing = (folder.patch(FIX), True), ("", False)
    batch: list[Group] = []
    for name, location in (("dir", str(folder.path)), ("bundle", str(bundle))):
        graded = folder.group({"a": fix, "b": fix, "f": nothing}, group_id=f"{name}-graded")
        single = folder.group({"a": fix, "f": nothing}, group_id=f"{name}-single-missing")
        for group, base in ((graded, folder.base), (single, missing)):
            task = group.task.model_copy(update={"repo": location, "base_commit": base})
            batch.append(group.model_copy(update={"task": task}))

    def canonical(results) -> dict[str, str]:
        # How long a grading took and where it ran (`details["ray"]`: node, attempt) are not its result.
        def where_and_when_left_out(r):
            details = {k: v for k, v in r.details.items() if k != "ray"}
            return r.model_copy(update={"seconds": 0.0, "details": details})

        return {r.group_id: where_and_when_left_out(r).model_dump_json() for r in results}

    runs: dict[str, dict[str, str]] = {}
    warm = GradingOptions(mirrors=MirrorCache(tmp_path / "in-process"))
    for order, groups in (("graded first", batch), ("single first", batch[::-1])):
        runs[f"in-process, {order}"] = canonical(grade_groups(groups, HeuristicGrader(), warm))
        cold = GradingOptions(mirrors=MirrorCache(tmp_path / f"ray {order}"))
        remote = RayGrader(options=cold, actors=2, per_actor=2)
        runs[f"ray, {order}"] = canonical(remote.grade(groups))
        remote.shutdown()
    first = runs["in-process, graded first"]
    for name, run in runs.items():
        assert run == first, name
    for kind in ("dir", "bundle"):
        result = GroupResult.model_validate_json(first[f"{kind}-single-missing"])
        assert result.outcome == Outcome.BASE_MISSING and missing in result.reason, result.reason
        assert json.loads(first[f"{kind}-graded"])["status"] == "graded"
