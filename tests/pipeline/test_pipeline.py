"""From group file to results.jsonl, through the real CLI and the Python API."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from grader.graders.base import Grade
from grader.graders.heuristic import HeuristicGrader
from grader.groups.formats import load_groups
from grader.groups.outcomes import Outcome
from grader.pipeline import GradingOptions, grade_group_sync
from grader.workspace.mirrors import MirrorCache
from tests.conftest import EXAMPLE_GROUP, FIX, RepoFactory, run_gagar

RESULT_KEYS = {
    "group_id",
    "status",
    "reason",
    "grader",
    "ranking",
    "weights",
    "advantages_before",
    "advantages_after",
    "redistribution",
    "redistribution_outcome",
    "outcome",
    "certainty",
    "trajectories",
    "flags",
    "usage",
    "transcript",
    "details",
    "seconds",
    "length",
}


def read_results(out: Path) -> dict[str, dict]:
    return {row["group_id"]: row for row in map(json.loads, (out / "results.jsonl").read_text().splitlines())}


def test_grading_the_bundled_example(tmp_path: Path) -> None:
    proc = run_gagar("grade", str(EXAMPLE_GROUP), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "clean-respaced" in proc.stdout and "1 group: 1 graded, 0 skipped, 0 failed" in proc.stdout
    (result,) = read_results(tmp_path).values()
    assert set(result) == RESULT_KEYS
    assert result["status"] == "graded" and result["grader"] == "heuristic"
    assert result["ranking"] == [
        ["clean", "clean-respaced"],
        ["leftover-script"],
        ["reformats-report"],
        ["edits-tests"],
    ]
    before, after = result["advantages_before"], result["advantages_after"]
    passing = [t for t in before if result["trajectories"][t]["passed"]]
    assert sum(after[t] for t in passing) == pytest.approx(sum(before[t] for t in passing), rel=1e-9)
    assert after["wrong-value"] == before["wrong-value"] and after["gave-up"] == before["gave-up"]
    assert after["clean"] > after["leftover-script"] > after["reformats-report"] > after["edits-tests"] > 0
    assert result["weights"]["clean"] == 1.0 and result["weights"]["edits-tests"] == 0.5
    report = result["trajectories"]["leftover-script"]
    assert report["apply_method"] == "plain" and report["branch"] == "refs/heads/candidates/leftover-script"
    assert report["stats"]["new_files"] == ["reproduce.py"] and report["signals"]["leftover_files"]
    assert result["trajectories"]["gave-up"]["branch"] == "refs/failing/gave-up"  # failing ones, for contrast


def test_a_bad_batch_grades_what_it_can(repo: RepoFactory, tmp_path: Path) -> None:
    good = repo.group(
        {"a": (repo.patch(FIX), True), "b": (repo.patch({"README.md": "x\n"}), True), "f": ("", False)},
        group_id="good",
    ).model_dump()
    all_pass = repo.group({"a": (repo.patch(FIX), True)}, group_id="all-pass").model_dump()
    all_fail = repo.group({"a": ("", False)}, group_id="all-fail").model_dump()
    missing_commit = dict(good, group_id="no-commit", task=dict(good["task"], base_commit="0" * 40))
    duplicate = dict(good, group_id="dupes", trajectories=good["trajectories"] + good["trajectories"][:1])
    one_bad_patch = dict(
        good,
        group_id="one-bad-patch",
        trajectories=[
            *good["trajectories"],
            dict(
                good["trajectories"][0], id="evil", patch="--- /dev/null\n+++ b/.git/x\n@@ -0,0 +1 @@\n+x\n"
            ),
        ],
    )
    nothing_applies = dict(
        good,
        group_id="nothing-applies",
        trajectories=[
            dict(good["trajectories"][0], patch="garbage"),
            dict(good["trajectories"][1], patch="garbage"),
            good["trajectories"][2],
        ],
    )
    lines = [
        json.dumps(g)
        for g in (good, all_pass, all_fail, missing_commit, duplicate, one_bad_patch, nothing_applies)
    ]
    lines.insert(3, "{not json")
    batch = tmp_path / "batch.jsonl"
    batch.write_text("\n".join(lines) + "\n")

    proc = run_gagar("grade", str(batch), "--out", str(tmp_path / "run"))
    assert proc.returncode == 1  # some groups failed
    results = (tmp_path / "run" / "results.jsonl").read_text().splitlines()
    assert len(results) == 8
    by_id = read_results(tmp_path / "run")
    assert by_id["good"]["status"] == "graded"
    assert by_id["all-pass"]["status"] == "skipped" and "no contrast" in by_id["all-pass"]["reason"]
    assert by_id["all-fail"]["status"] == "skipped" and "no passing" in by_id["all-fail"]["reason"]
    assert by_id["?"]["status"] == "failed" and "invalid JSON" in by_id["?"]["reason"]
    assert by_id["no-commit"]["status"] == "failed" and "'no-commit'" in by_id["no-commit"]["reason"]
    assert "not in repository" in by_id["no-commit"]["reason"]
    assert by_id["dupes"]["status"] == "failed" and "duplicate trajectory ids: a" in by_id["dupes"]["reason"]
    bad = by_id["one-bad-patch"]
    assert bad["status"] == "graded" and sorted(t for tier in bad["ranking"] for t in tier) == ["a", "b"]
    assert "into .git" in bad["trajectories"]["evil"]["error"]
    assert bad["advantages_after"]["evil"] == bad["advantages_before"]["evil"]
    assert "evil" not in bad["weights"] and "left out: evil" in bad["reason"]
    assert by_id["nothing-applies"]["status"] == "failed"
    for result in by_id.values():
        if result["status"] != "graded":
            assert result["advantages_after"] == result["advantages_before"], result["group_id"]
            assert result["ranking"] == []


def test_grade_all_pass_ranks_a_standalone_patch_set(repo: RepoFactory, tmp_path: Path) -> None:
    group = repo.group(
        {"a": (repo.patch(FIX), True), "b": (repo.patch({**FIX, "notes.txt": "x\n"}), True)}, group_id="set"
    )
    path = tmp_path / "set.json"
    path.write_text(group.model_dump_json())
    proc = run_gagar("grade", str(path), "--out", str(tmp_path / "run"), "--grade-all-pass")
    assert proc.returncode == 0, proc.stderr
    result = read_results(tmp_path / "run")["set"]
    assert result["status"] == "graded" and result["ranking"] == [["a"], ["b"]]
    # GRPO gives every member of an all-pass group advantage 0: nothing to move, and the result says so.
    assert result["advantages_after"] == result["advantages_before"]
    assert result["redistribution"].startswith("identity: passing advantage <= 0")


class Broken:
    """Graders that misbehave, to check a group fails cleanly instead of crashing the batch."""

    name = "broken"

    def __init__(self, ranking=None, exc: Exception | None = None) -> None:
        self.ranking, self.exc = ranking, exc

    def grade(self, workspace) -> Grade:
        if self.exc is not None:
            raise self.exc
        return Grade(ranking=self.ranking)


@pytest.mark.parametrize(
    ("grader", "reason"),
    [
        (Broken(ranking=[["a"]]), "invalid ranking from broken: missing: b"),
        (Broken(ranking=[["a", "b", "zz"]]), "unknown: zz"),
        (Broken(ranking=[["a"], ["a", "b"]]), "ranked more than once: a"),
        (Broken(exc=RuntimeError("endpoint down")), "RuntimeError: endpoint down"),
    ],
)
def test_a_failing_grader_leaves_advantages_unchanged(repo: RepoFactory, grader, reason: str) -> None:
    group = repo.group(
        {"a": (repo.patch(FIX), True), "b": (repo.patch({"README.md": "x\n"}), True), "f": ("", False)}
    )
    result = grade_group_sync(group, grader)
    assert result.status == "failed" and reason in result.reason
    assert result.advantages_after == result.advantages_before and result.ranking == []


def test_token_preservation_needs_lengths(repo: RepoFactory) -> None:
    group = repo.group(
        {"a": (repo.patch(FIX), True), "b": (repo.patch({**FIX, "x.py": "x\n"}), True), "f": ("", False)}
    )
    from grader.graders.heuristic import HeuristicGrader

    result = grade_group_sync(group, HeuristicGrader(), GradingOptions(preserve="token"))
    assert result.status == "graded" and result.redistribution.startswith("identity: preserve='token' needs")
    lengths = {"a": 100, "b": 300, "f": 50}
    with_lengths = group.model_copy(
        update={
            "trajectories": [
                t.model_copy(update={"response_length": lengths[t.id]}) for t in group.trajectories
            ]
        }
    )
    result = grade_group_sync(with_lengths, HeuristicGrader(), GradingOptions(preserve="token"))
    assert result.redistribution == "applied"
    before, after = result.advantages_before, result.advantages_after
    assert sum(after[t] * lengths[t] for t in "ab") == pytest.approx(
        sum(before[t] * lengths[t] for t in "ab")
    )


def test_workspace_command_keeps_the_workspace(repo: RepoFactory, tmp_path: Path) -> None:
    group = repo.group({"fix": (repo.patch(FIX), True), "nope": ("", False)}, group_id="w")
    path = tmp_path / "w.json"
    path.write_text(group.model_dump_json())
    proc = run_gagar("workspace", str(path), "--dir", str(tmp_path / "ws"))
    assert proc.returncode == 0, proc.stderr
    assert "fix\tpass\trefs/heads/candidates/fix  [plain]  class 0" in proc.stdout
    assert "nope\tfail\trefs/failing/nope  [empty]" in proc.stdout
    show = subprocess.run(
        ["git", f"--git-dir={tmp_path / 'ws' / 'repo.git'}", "diff", "base", "candidates/fix"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "+    return a + b" in show.stdout


def test_load_errors_become_failed_results(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"group_id": "broken", "task": {}}\n')
    (item,) = load_groups([path])
    from grader.graders.heuristic import HeuristicGrader

    result = grade_group_sync(item, HeuristicGrader())
    assert result.group_id == "broken" and result.status == "failed" and "task.repo" in result.reason


def test_a_missing_base_is_not_hidden_behind_sampling(repo: RepoFactory, mirrors: MirrorCache) -> None:
    """A single-passing group (which sampling skips) whose base is not in its local repository fails naming
    the commit, with the reason a graded group gets, whether or not the repository is mirrored; the lookup
    clones nothing. For a URL the skip stands, saying the base was not checked."""
    missing = "0" * 40
    single = repo.group({"a": (repo.patch(FIX), True), "f": ("", False)}, group_id="single")
    broken = single.model_copy(update={"task": single.task.model_copy(update={"base_commit": missing})})
    options = GradingOptions(mirrors=mirrors)

    unmirrored = grade_group_sync(broken, HeuristicGrader(), options)
    assert unmirrored.status == "failed" and unmirrored.outcome == Outcome.BASE_MISSING
    assert missing in unmirrored.reason and "'single'" in unmirrored.reason
    assert unmirrored.advantages_after == unmirrored.advantages_before
    assert not mirrors.path_for(single.task.repo).exists()  # asked of the repository: no clone

    mirrors.mirror(single.task.repo, repo.base)  # now the repository is mirrored (at its real base)
    assert grade_group_sync(broken, HeuristicGrader(), options).reason == unmirrored.reason

    fine = grade_group_sync(single, HeuristicGrader(), options)
    assert (
        fine.status == "skipped" and fine.reason == "a single passing trajectory: nothing to rank it against"
    )

    graded = repo.group({"a": (repo.patch(FIX), True), "b": (repo.patch(FIX), True), "f": ("", False)})
    graded = graded.model_copy(update={"task": graded.task.model_copy(update={"base_commit": missing})})
    failed = grade_group_sync(graded, HeuristicGrader(), options)
    assert failed.outcome == Outcome.BASE_MISSING
    assert failed.reason == unmirrored.reason.replace("'single'", "'g1'")

    url = broken.model_copy(update={"task": broken.task.model_copy(update={"repo": "https://git.invalid/x"})})
    unchecked = grade_group_sync(url, HeuristicGrader(), options)
    assert unchecked.status == "skipped" and unchecked.outcome == Outcome.SINGLE_PASSING
    assert unchecked.reason.endswith(
        "(base commit not checked: 'https://git.invalid/x' is a URL, fetched for graded groups only)"
    )


def test_a_skipped_groups_repository_that_is_not_one_fails_the_group(
    tmp_path: Path, repo: RepoFactory
) -> None:
    """A path that does not exist, or a folder inside a repository that is not one itself: the group fails as
    a graded group would (`workspace`), naming the cause."""
    single = repo.group({"a": (repo.patch(FIX), True), "f": ("", False)}, group_id="single")
    inside = repo.path / "pkg"
    for location, cause in ((tmp_path / "nowhere", "does not exist"), (inside, "not a git repository")):
        task = single.task.model_copy(update={"repo": str(location)})
        result = grade_group_sync(single.model_copy(update={"task": task}), HeuristicGrader())
        assert result.status == "failed" and result.outcome == Outcome.WORKSPACE, result.reason
        assert cause in result.reason and "'single'" in result.reason


def test_what_a_tolerant_apply_tolerated_is_in_the_trajectorys_record(repo: RepoFactory) -> None:
    fix = repo.patch(FIX)
    respaced = fix.replace(
        " def add(a, b):", " def  add(a,  b):"
    )  # context differs from the file in whitespace
    # "again" is a converged rollout: the same patch as "respaced", applied once and its outcome shared.
    group = repo.group(
        {"plain": (fix, True), "respaced": (respaced, True), "again": (respaced, True), "f": ("", False)}
    )
    result = grade_group_sync(group, HeuristicGrader())
    assert result.status == "graded", result.reason
    plain, tolerant = result.trajectories["plain"], result.trajectories["respaced"]
    assert plain.apply_method == "plain" and plain.tolerated == []
    assert tolerant.apply_method == "whitespace" and tolerant.error is None
    assert "pkg/core.py: hunk 1: old lines matched the file only up to whitespace" in tolerant.tolerated
    assert json.loads(result.model_dump_json())["trajectories"]["respaced"]["tolerated"] == tolerant.tolerated
    assert len(set(tolerant.tolerated)) == len(tolerant.tolerated)  # each note once
    assert result.trajectories["again"].tolerated == tolerant.tolerated


def test_a_failure_after_redistribution_restores_the_advantages(
    repo: RepoFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The grading and the redistribution succeed, then taking the workspace down fails (a disk error: root
    # cannot make a rename fail for real here, so the real removal runs and an I/O error follows it). The
    # group fails, and none of the credit already moved may reach the trainer.
    import errno

    from grader.workspace import bare

    group = repo.group(
        {"a": (repo.patch(FIX), True), "b": (repo.patch({"README.md": "x\n"}), True), "f": ("", False)}
    )
    graded = grade_group_sync(group, Broken(ranking=[["a"], ["b"]]))
    assert graded.status == "graded" and graded.advantages_after != graded.advantages_before
    real_remove = bare.remover.remove

    def remove_then_fail(path: Path) -> None:
        real_remove(path)
        raise OSError(errno.EIO, "Input/output error", str(path))

    monkeypatch.setattr(bare.remover, "remove", remove_then_fail)
    result = grade_group_sync(group, Broken(ranking=[["a"], ["b"]]))
    assert result.status == "failed" and result.outcome is Outcome.INTERNAL_ERROR
    assert "Input/output error" in result.reason and repr(group.group_id) in result.reason
    assert result.advantages_after == result.advantages_before
    assert result.ranking == [] and result.weights == {}
