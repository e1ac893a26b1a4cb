"""`gagar bench prepare`: a recipe of pointers materialized from real git repositories the test builds.

Each test builds two real repositories: a data source (acme/runs: two runs' prediction files, their harness
reports and the dataset rows, committed) and a task repository (acme/widget: two base commits). The recipe
points at them by commit, path and sha256, as benchmarks/swebench-lite does at its public sources.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from grader.errors import GitError
from grader.evaluation import cli
from grader.evaluation.benchmark import load_benchmark
from grader.evaluation.prepare import (
    NotPrepared,
    ShaMismatch,
    SourceLocator,
    SourceMissing,
    prepare,
    prepared_root,
    resolve_bench,
)
from grader.evaluation.recipe import EXCLUDED_REPOSITORIES, load_recipe
from grader.workspace.gitcmd import git
from tests.conftest import REPO_ROOT
from tests.support.recipe_sources import DATA, TASK, commit_all, sources

__all__ = ["sources"]  # the fixture


def edit_lines(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    items = [json.loads(line) for line in path.read_text().splitlines()]
    change(items)
    path.write_text("".join(json.dumps(item) + "\n" for item in items))


def test_prepare_writes_the_verification_track_and_eval_scores_it(
    sources: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = load_recipe(sources["recipe"])
    report = prepare(recipe, SourceLocator(roots=[sources["root"]]))
    assert report.tracks["verification"] == {"groups": 2, "candidates": 5, "pairs": 3}
    assert "preference" not in report.tracks  # nothing labelled yet
    bench = load_benchmark(resolve_bench(str(sources["recipe"]), "verification"))
    assert bench.manifest["candidates_may_fail"] is True
    assert all(t.passed for g in bench.groups.values() for t in g.trajectories)
    pairs = {p.pair for p in bench.references["acme__widget-1"].preferences}
    assert pairs == {("run-a", "run-b"), ("run-c", "run-b")}
    assert bench.references["acme__widget-2"].preferences[0].pair == ("run-b", "run-a")
    assert bench.repository_of("acme__widget-1") == TASK
    # The groups name the task by URL; the mirror cache answers for it offline.
    assert bench.groups["acme__widget-1"].task.repo == "https://github.com/acme/widget"
    out = tmp_path / "run"
    code = cli.main(
        [
            "eval",
            "--bench",
            str(sources["recipe"]),
            "--track",
            "verification",
            "--out",
            str(out),
            "--bootstrap",
            "0",
        ]
    )
    evaluation = json.loads((out / "eval.json").read_text())
    assert code == 0, capsys.readouterr()
    assert evaluation["overall"]["graded"] == 2 and evaluation["overall"]["scored_pairs"] == 3


def test_list_sources_prints_every_repository_one_per_line(
    sources: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["bench", "prepare", str(sources["recipe"]), "--list-sources"]) == 0
    assert capsys.readouterr().out.splitlines() == [DATA, TASK]


def test_a_missing_source_is_named_with_the_command_that_fixes_it(
    sources: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    only_data = tmp_path / "only-data"
    (only_data / "acme").mkdir(parents=True)
    (only_data / "acme" / "runs").symlink_to(sources["data"])
    with pytest.raises(SourceMissing) as caught:
        prepare(load_recipe(sources["recipe"]), SourceLocator(roots=[only_data]))
    message = str(caught.value)
    assert "acme/widget: git clone --bare https://github.com/acme/widget" in message
    assert "acme/runs" not in message.split("not here:")[1]
    code = cli.main(
        ["bench", "prepare", str(sources["recipe"]), "--source-root", str(only_data), "--offline"]
    )
    assert code == 2 and "acme/widget" in capsys.readouterr().err
    # --source names the missing one by hand.
    given = f"{TASK}={sources['task']}"
    argv = ["bench", "prepare", str(sources["recipe"]), "--source-root", str(only_data), "--source", given]
    assert cli.main([*argv, "--offline"]) == 0


def test_a_sha_mismatch_names_the_first_file_or_patch_that_differs(sources: dict) -> None:
    recipe_dir: Path = sources["recipe"]

    def wrong_patch(items: list[dict]) -> None:
        items[1]["sha256"] = "0" * 64

    edit_lines(recipe_dir / "candidates.jsonl", wrong_patch)
    with pytest.raises(ShaMismatch, match=r"acme__widget-2 / run-a .*the recipe says 0{64}"):
        prepare(load_recipe(recipe_dir), SourceLocator(roots=[sources["root"]]))
    manifest = json.loads((recipe_dir / "recipe.json").read_text())
    manifest["files"]["run-b/report"]["sha256"] = "f" * 64
    (recipe_dir / "recipe.json").write_text(json.dumps(manifest))
    with pytest.raises(ShaMismatch, match=r"run-b/report.json \(file run-b/report\) hashes to"):
        prepare(load_recipe(recipe_dir), SourceLocator(roots=[sources["root"]]))


def test_a_file_moved_later_is_read_at_the_pinned_commit_and_a_wrong_path_is_named(sources: dict) -> None:
    data: Path = sources["data"]
    git(["mv", "run-a", "moved-run-a"], cwd=data)
    commit_all(data, "move run-a")
    report = prepare(load_recipe(sources["recipe"]), SourceLocator(roots=[sources["root"]]))
    assert report.tracks["verification"]["groups"] == 2
    manifest = json.loads((sources["recipe"] / "recipe.json").read_text())
    manifest["files"]["run-a/predictions"]["path"] = (
        "moved-run-a/preds.jsonl"  # not there at the pinned commit
    )
    (sources["recipe"] / "recipe.json").write_text(json.dumps(manifest))
    with pytest.raises(GitError, match=r"acme/runs@\w{12}:moved-run-a/preds.jsonl: not in"):
        prepare(load_recipe(sources["recipe"]), SourceLocator(roots=[sources["root"]]))


def test_prepare_resumes_after_a_kill_and_a_second_run_is_a_no_op(sources: dict, tmp_path: Path) -> None:
    script = f"""
import os, signal, sys
from grader.evaluation.prepare import SourceLocator, prepare
from grader.evaluation.recipe import load_recipe
def progress(what, done, total):
    if what == "acme__widget-2":  # the two rows are done; the mirror is next
        os.kill(os.getpid(), signal.SIGKILL)
recipe = load_recipe({str(sources["recipe"])!r})
prepare(recipe, SourceLocator(roots=[{str(sources["root"])!r}]), progress=progress)
"""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    killed = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    out = prepared_root() / "tiny-recipe"
    assert not (out / "verification").exists()
    recipe = load_recipe(sources["recipe"])
    resumed = prepare(recipe, SourceLocator(roots=[sources["root"]]))
    assert resumed.resumed == 2  # the two rows
    first = (out / "verification" / "groups" / "verification.jsonl").read_text()
    again = prepare(recipe, SourceLocator(roots=[sources["root"]]))
    assert again.resumed == 3  # rows and the mirror
    assert (out / "verification" / "groups" / "verification.jsonl").read_text() == first


def test_an_unprepared_recipe_says_so_and_gives_the_command(
    sources: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(NotPrepared, match="gagar bench prepare tiny-recipe --source-root DIR"):
        resolve_bench(str(sources["recipe"]), "verification")
    assert cli.main(["bench", "check", str(sources["recipe"]), "--track", "verification", "--no-probes"]) == 2
    assert "is not prepared" in capsys.readouterr().err
    code = cli.main(
        ["eval", "--bench", str(sources["recipe"]), "--track", "verification", "--out", str(tmp_path)]
    )
    assert code == 2 and "gagar bench prepare tiny-recipe" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["swebench-lite", "swebench-lite-large"])
def test_the_committed_swebench_lite_recipes_are_pointers_only(name: str) -> None:
    folder = REPO_ROOT / "benchmarks" / name
    recipe = load_recipe(folder)
    from grader.evaluation.prepare import verification_groups

    groups = verification_groups(recipe)
    assert sum(len(r) * len(u) for r, u in groups.values()) >= 300
    assert not {i.repository for i in recipe.instances.values()} & EXCLUDED_REPOSITORIES
    assert all(source.get("licence") for source in recipe.manifest["sources"])
    for path in folder.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            assert "diff --git" not in text and "problem_statement" not in text, path


def test_swebench_lite_and_its_large_rest_split_the_instances_as_the_generator_says() -> None:
    """The published figures are over swebench-lite: it must hold none of the instances that could not be
    prepared where they were made, and the two recipes together must be one benchmark (same runs, disjoint
    instances, one split, each recipe's labels on its own instances)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_swebench_lite", REPO_ROOT / "benchmarks/tools/make_swebench_lite.py"
    )
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    lite = load_recipe(REPO_ROOT / "benchmarks" / generator.NAME)
    large = load_recipe(REPO_ROOT / "benchmarks" / generator.LARGE_NAME)
    assert lite.manifest["runs"] == large.manifest["runs"] and lite.files == large.files
    assert not set(lite.instances) & set(large.instances)
    assert {i.repository for i in large.instances.values()} >= set(generator.LARGE_REPOSITORIES)
    assert not {i.repository for i in lite.instances.values()} & set(generator.LARGE_REPOSITORIES)
    assert set(generator.LARGE_INSTANCES) <= set(large.instances)
    for recipe in (lite, large):
        assert all(recipe.split[i] == generator.split_of(i) for i in recipe.instances)
        for name in ("references.jsonl", "labels.jsonl"):
            text = (recipe.root / name).read_text(encoding="utf-8")
            groups = {json.loads(line)["group_id"] for line in text.splitlines() if line.strip()}
            assert groups <= set(recipe.instances), (
                recipe.name,
                name,
                sorted(groups - set(recipe.instances)),
            )


def test_routing_labels_after_agree_moves_each_line_once(tmp_path: Path) -> None:
    """labelling.py `agree` rewrites every labelled pair into swebench-lite, the large recipe's instances
    included: routing must move those lines to the large recipe without repeating the ones it holds, and the
    committed recipes hold no line twice."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "make_swebench_lite", REPO_ROOT / "benchmarks/tools/make_swebench_lite.py"
    )
    assert spec is not None and spec.loader is not None
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    lite, large = tmp_path / "lite", tmp_path / "large"
    held = json.dumps({"group_id": "big__big-1", "better": "a", "worse": "b", "category": "design"})
    fresh = json.dumps({"group_id": "big__big-1", "better": "c", "worse": "d", "category": "scope"})
    ours = json.dumps({"group_id": "small__small-1", "better": "a", "worse": "b", "category": "behaviour"})
    for folder, instance, references in (
        (lite, "small__small-1", [ours, held, fresh]),
        (large, "big__big-1", [held]),
    ):
        folder.mkdir()
        (folder / "instances.jsonl").write_text(json.dumps({"instance": instance}) + "\n", encoding="utf-8")
        (folder / "references.jsonl").write_text("".join(r + "\n" for r in references), encoding="utf-8")
        (folder / "labels.jsonl").write_text("", encoding="utf-8")
    generator.route_our_work([lite, large])
    assert (lite / "references.jsonl").read_text(encoding="utf-8").splitlines() == [ours]
    assert (large / "references.jsonl").read_text(encoding="utf-8").splitlines() == [held, fresh]
    for name in (generator.NAME, generator.LARGE_NAME):
        for file_name in ("references.jsonl", "labels.jsonl"):
            lines = [
                line
                for line in (REPO_ROOT / "benchmarks" / name / file_name)
                .read_text(encoding="utf-8")
                .splitlines()
                if line.strip()
            ]
            assert len(lines) == len(set(lines)), (name, file_name)


def test_the_llm_grader_mode_for_a_verification_track_drops_the_all_pass_claim(sources: dict) -> None:
    import argparse

    from grader.cli.options import add_grading_arguments, grading_from_args
    from grader.graders.llm.agent import ALL_PASS_CLAIM, LLMGrader, candidates_may_fail
    from grader.graders.llm.prompts import load_prompts

    shipped = load_prompts().system
    assert ALL_PASS_CLAIM.search(shipped), "prompts/system.md no longer words the claim the mode replaces"
    changed = candidates_may_fail(shipped)
    assert "already" not in changed and "may not fix the task" in changed
    assert "may not fix the task" in candidates_may_fail("A custom prompt.")

    prepare(load_recipe(sources["recipe"]), SourceLocator(roots=[sources["root"]]))
    bench = load_benchmark(resolve_bench(str(sources["recipe"]), "verification"))
    parser = argparse.ArgumentParser()
    add_grading_arguments(parser)
    args = parser.parse_args(["--grader", "llm", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"])
    grading = grading_from_args(args)
    assert not grading.grader_options.get("candidates_may_fail")
    cli.bench_grading_mode(bench, grading)
    grader = LLMGrader(**grading.grader_options)
    assert grader.config.candidates_may_fail
    heuristic = grading_from_args(parser.parse_args(["--grader", "heuristic"]))
    cli.bench_grading_mode(bench, heuristic)
    assert "candidates_may_fail" not in heuristic.grader_options


def test_labelled_preference_pairs_become_the_preference_track(
    sources: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe_dir: Path = sources["recipe"]
    with pytest.raises(Exception, match="no labelled preference pairs yet"):
        resolve_bench(str(recipe_dir), None)
    pair = {"group_id": "acme__widget-1", "better": "run-a", "worse": "run-c"}
    (recipe_dir / "references.jsonl").write_text(
        json.dumps({**pair, "category": "hygiene", "reason": "run-c leaves a comment behind"}) + "\n"
    )
    labels = [
        {"group_id": "acme__widget-1", "a": "run-a", "b": "run-c", "labeller": who, "verdict": "a"}
        for who in ("first", "second")
    ]
    (recipe_dir / "labels.jsonl").write_text("".join(json.dumps(label) + "\n" for label in labels))
    manifest = json.loads((recipe_dir / "recipe.json").read_text())
    manifest["labellers"] = {"first": "a test", "second": "another test"}
    (recipe_dir / "recipe.json").write_text(json.dumps(manifest))
    report = prepare(load_recipe(recipe_dir), SourceLocator(roots=[sources["root"]]))
    assert report.tracks["preference"] == {"groups": 1, "candidates": 2, "pairs": 1}
    bench = load_benchmark(resolve_bench(str(recipe_dir), None))  # the default track
    assert bench.manifest["candidates_may_fail"] is False
    assert bench.agreement().agreed == 1
    assert [t.id for t in bench.groups["acme__widget-1"].trajectories] == ["run-a", "run-c"]
    out = tmp_path / "pref"
    assert cli.main(["eval", "--bench", str(recipe_dir), "--out", str(out), "--bootstrap", "0"]) == 0
    assert json.loads((out / "eval.json").read_text())["overall"]["scored_pairs"] == 1


def test_a_prepared_track_is_refused_as_distillation_input(sources: dict) -> None:
    from grader.distill.benchmarks import benchmark_folders, load_benchmarks

    prepare(load_recipe(sources["recipe"]), SourceLocator(roots=[sources["root"]]))
    folders = benchmark_folders([], [prepared_root()])
    assert prepared_root() / "tiny-recipe" / "verification" in folders
    groups = load_benchmark(resolve_bench(str(sources["recipe"]), "verification")).groups
    # widget-2 is in the test split: refused. widget-1 is dev, where a grader is tuned and taught: free.
    assert "is in the benchmark" in (load_benchmarks(folders).refusal(groups["acme__widget-2"]) or "")
    assert load_benchmarks(folders).refusal(groups["acme__widget-1"]) is None


def test_the_dev_references_of_a_prepared_track_distill_the_dev_groups_only(
    sources: dict, tmp_path: Path
) -> None:
    """`gagar distill GROUPS --reference references.dev.jsonl` on a prepared track: the plan keeps the dev
    groups and leaves the test ones out (no reference there, and refused as benchmark groups)."""
    from grader.distill.benchmarks import benchmark_folders, load_benchmarks
    from grader.distill.run import plan
    from grader.ranking.references import load_references

    prepare(load_recipe(sources["recipe"]), SourceLocator(roots=[sources["root"]]))
    track = prepared_root() / "tiny-recipe" / "verification"
    dev = load_references(track / "references.dev.jsonl")
    assert set(dev) == {"acme__widget-1"}
    assert set(load_references(track / "references.test.jsonl")) == {"acme__widget-2"}
    benchmarks = load_benchmarks(benchmark_folders([], [prepared_root()]))
    chosen = plan([track / "groups" / "verification.jsonl"], dev, benchmarks, tmp_path / "out", 1)
    assert [g.group_id for g in chosen.groups] == ["acme__widget-1"]
    assert chosen.left_out["acme__widget-2"]["status"] == "refused"
