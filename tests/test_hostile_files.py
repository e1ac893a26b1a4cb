"""Group files, SWE-bench files and run folders as an attacker would write them (issue 34, items 1, 12, 14).

A group file's repository and base commit reach git; a SWE-bench file's become a path and a git argument; a
run folder's files are read into reports meant to be shared. Each hostile value is refused with an error
naming the file, the group or instance and the field, costs only its own group, and runs nothing: a value
git would read as an option would `touch` a canary, which each test asserts is absent.

Real parts: the bundled example group (a real git bundle), the real heuristic grader, `gagar grade`,
`gagar import swebench`, `gagar show` and `gagar report` as commands, git itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from grader.errors import GitError
from grader.groups.formats import LoadFailure, load_groups
from grader.workspace.mirrors import MirrorCache, has_commit
from tests.conftest import EXAMPLE_GROUP, run_gagar

SECRET = "TOP-SECRET-5d21e0"  # in a file outside the run: must never reach a report


def example(group_id: str) -> dict[str, Any]:
    data = json.loads(EXAMPLE_GROUP.read_text())
    data["group_id"] = group_id
    data["task"]["repo"] = str(EXAMPLE_GROUP.parent / data["task"]["repo"])
    return data


def write_jsonl(path: Path, items: list[Any]) -> Path:
    path.write_text("".join((item if isinstance(item, str) else json.dumps(item)) + "\n" for item in items))
    return path


# -- group files: the fields that reach git ------------------------------------------------------------------

HOSTILE_TASKS = {
    "repo as an option": ("repo", "--upload-pack=touch CANARY;:://x"),
    "repo as a remote helper": ("repo", "ext::sh -c touch% CANARY"),
    "repo of another transport": ("repo", "fd::17"),
    "base_commit as an option": ("base_commit", "--output=CANARY"),
    "base_commit as revision syntax": ("base_commit", "HEAD@{-1}"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TASKS))
def test_a_group_files_repo_and_base_commit_are_checked_before_git_sees_them(
    tmp_path: Path, case: str
) -> None:
    field, value = HOSTILE_TASKS[case]
    canary = tmp_path / "canary"
    hostile = example("hostile")
    hostile["task"][field] = value.replace("CANARY", str(canary))
    groups = write_jsonl(tmp_path / "groups.jsonl", [example("fine"), hostile])
    (_, failure) = load_groups([groups])
    assert isinstance(failure, LoadFailure) and failure.group_id == "hostile"
    assert f"task.{field}: " in failure.reason and "is refused: expected" in failure.reason
    done = run_gagar("grade", str(groups), "--out", str(tmp_path / "run"))
    assert done.returncode == 1, done.stderr  # one group failed, named; the other graded
    assert "fine: graded" in done.stdout and "hostile" in done.stdout and f"task.{field}" in done.stdout
    assert not canary.exists()


def test_git_takes_a_repo_and_commit_that_slipped_past_the_checks_as_names(tmp_path: Path) -> None:
    """Trainer rows build tasks without a group file: the mirror's git calls put the repository after `--`
    and the commit after `--end-of-options`, so neither is ever an option."""
    canary = tmp_path / "canary"
    mirrors = MirrorCache(tmp_path / "mirrors")
    with pytest.raises(GitError, match="protocol '--upload-pack=touch .*' is not supported"):
        mirrors.mirror(f"--upload-pack=touch {canary};:://x", "0" * 40)  # read as the URL, not an option
    bundle = example("x")["task"]["repo"]
    mirror = mirrors.mirror(bundle, example("x")["task"]["base_commit"])
    assert not has_commit(mirror, f"--output={canary}")
    assert not mirrors.local_has_commit(str(mirror), "--all")
    assert not canary.exists()


# -- group files: a key given twice ------------------------------------------------------------------------


def test_a_group_file_repeating_a_key_is_refused_with_the_key_named(tmp_path: Path) -> None:
    """JSON readers keep the last of a repeated key: a second `passed` or `patch` would silently win."""
    line = json.dumps(example("twice"))
    repeated = line.replace('"id": "clean",', '"id": "clean", "passed": false,', 1)
    assert repeated != line
    array = (
        "["
        + json.dumps(example("first"))
        + ", "
        + json.dumps(example("x")).replace('"group_id": "x"', '"group_id": "x", "group_id": "y"')
        + "]"
    )
    (tmp_path / "a.json").write_text(array)
    loaded = load_groups(
        [write_jsonl(tmp_path / "g.jsonl", [repeated, example("fine")]), tmp_path / "a.json"]
    )
    assert [type(item).__name__ for item in loaded] == ["LoadFailure", "Group", "Group", "LoadFailure"]
    first, _, _, last = loaded
    assert str(first) == f"{tmp_path / 'g.jsonl'}:1: group 'twice': key 'passed' appears twice in one object"
    assert str(last) == f"{tmp_path / 'a.json'}[1]: group 'y': key 'group_id' appears twice in one object"


# -- SWE-bench files ----------------------------------------------------------------------------------------

HOSTILE_INSTANCES = {
    "repo climbing out of --repo-root": ("repo", "../../etc"),
    "repo as an option": ("repo", "--upload-pack=touch CANARY;:/x"),
    "base_commit as an option": ("base_commit", "--upload-pack=touch CANARY;:"),
    "base_commit short": ("base_commit", "abc123"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_INSTANCES))
def test_a_swebench_instance_is_checked_before_it_becomes_a_path_or_a_git_argument(
    tmp_path: Path, case: str
) -> None:
    field, value = HOSTILE_INSTANCES[case]
    canary = tmp_path / "canary"
    row = {"instance_id": "o__r-1", "repo": "o/r", "base_commit": "a" * 40, "problem_statement": "bug"}
    row[field] = value.replace("CANARY", str(canary))
    instances = write_jsonl(tmp_path / "instances.jsonl", [row])
    predictions = write_jsonl(tmp_path / "p.jsonl", [{"instance_id": "o__r-1", "model_patch": "x"}])
    report = tmp_path / "r.json"
    report.write_text(json.dumps({"resolved": ["o__r-1"]}))
    done = run_gagar(
        "import", "swebench", "--instances", str(instances), "--predictions", str(predictions),
        "--results", str(report), "--repo-root", str(tmp_path / "repos"), "-o", str(tmp_path / "g.jsonl"),
    )  # fmt: skip
    assert done.returncode == 2 and not (tmp_path / "g.jsonl").exists()
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # one line, no traceback
    assert f"{instances}: instance 'o__r-1': {field}: " in lines[0] and "is refused: expected" in lines[0]
    assert not canary.exists()


# -- run folders: readers stay inside ------------------------------------------------------------------------


@pytest.fixture
def graded_run(tmp_path: Path) -> Path:
    done = run_gagar("grade", str(EXAMPLE_GROUP), "--out", str(tmp_path / "run"))
    assert done.returncode == 0, done.stderr
    return tmp_path / "run"


def test_show_and_report_refuse_a_groups_file_linked_out_of_the_run(graded_run: Path, tmp_path: Path) -> None:
    outside = example("inventory-average-empty")
    for trajectory in outside["trajectories"]:
        trajectory["patch"] = f"diff --git a/{SECRET} b/{SECRET}\n"
    secret = write_jsonl(tmp_path / "elsewhere.jsonl", [outside])
    (graded_run / "groups.jsonl").unlink()
    (graded_run / "groups.jsonl").symlink_to(secret)
    shown = run_gagar("show", str(graded_run), "inventory-average-empty", "--full")
    summary = run_gagar("show", str(graded_run))
    report = run_gagar("report", str(graded_run))
    for done in (shown, summary, report):
        assert done.returncode == 0, done.stderr
        assert SECRET not in done.stdout + done.stderr
    page = (graded_run / "report.html").read_text()
    assert SECRET not in page
    refused = f"refused: {graded_run / 'groups.jsonl'} resolves to {secret}, outside the run directory"
    assert refused in re.sub(r"\s+", " ", summary.stdout) and refused in page


def test_a_results_file_linked_out_of_the_run_is_an_error_naming_it(graded_run: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(graded_run / "results.jsonl", elsewhere / "results.jsonl")
    os.symlink(elsewhere / "results.jsonl", graded_run / "results.jsonl")
    for command in (("show", str(graded_run)), ("report", str(graded_run))):
        done = run_gagar(*command)
        assert done.returncode == 2 and not (graded_run / "report.html").exists()
        assert (
            done.stderr.strip().startswith("error: results.jsonl refused: ")
            and "outside the run" in done.stderr
        )
