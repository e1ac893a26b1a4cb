"""Group files: validation, completion (pass flags, GRPO advantages), batch loading, SWE-bench import."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from grader.errors import InputFileError
from grader.groups.formats import LoadFailure, load_group_file, load_groups, parse_group
from grader.groups.models import Group
from grader.sandbox.swebench import import_swebench
from tests.conftest import run_git

TASK = {"repo": "repo", "base_commit": "abc", "statement": "fix it"}


def group(group_id: str = "g", **overrides) -> dict:
    data = {
        "group_id": group_id,
        "task": TASK,
        "trajectories": [
            {"id": "a", "patch": "", "reward": 1.0},
            {"id": "b", "patch": "", "reward": 0.0},
            {"id": "c", "patch": "", "reward": 1.0},
            {"id": "d", "patch": "", "reward": 0.0},
        ],
    }
    data.update(overrides)
    return data


def test_pass_flags_and_grpo_advantages_from_rewards() -> None:
    g = parse_group(group())
    assert [t.passed for t in g.trajectories] == [True, False, True, False]
    std = math.sqrt(4 * 0.25 / 3)  # unbiased, as verl and TRL compute it
    expected = [(r - 0.5) / (std + 1e-6) for r in (1, 0, 1, 0)]
    assert [t.advantage for t in g.trajectories] == pytest.approx(expected, rel=1e-12)


def test_threshold_explicit_flags_and_given_advantages_win() -> None:
    data = group(
        trajectories=[
            {"id": "a", "reward": 0.7, "advantage": 2.0},
            {"id": "b", "reward": 0.2, "passed": True, "advantage": -1.0},
        ]
    )
    g = parse_group(data, pass_threshold=0.5)
    assert [t.passed for t in g.trajectories] == [True, True]
    assert [t.advantage for t in g.trajectories] == [2.0, -1.0]


def test_relative_repo_is_resolved_against_the_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "groups.json"
    path.parent.mkdir()
    path.write_text(json.dumps(group()))
    (g,) = load_group_file(path)
    assert g.task.repo == str((tmp_path / "sub" / "repo").resolve())


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d["trajectories"].append({"id": "a", "reward": 1.0}), "duplicate trajectory ids: a"),
        (lambda d: d["trajectories"][0].update(reward=float("nan")), "'a': reward is nan"),
        (lambda d: d["trajectories"][1].update(advantage=float("inf")), "'b': advantage is inf"),
        (lambda d: d["trajectories"][0].pop("reward"), "neither `passed` nor `reward`"),
        (lambda d: d.pop("task"), "task: Field required"),
        (lambda d: d["trajectories"][0].update(bogus=1), "trajectories.0.bogus"),
        (lambda d: d.update(trajectories=[]), "at least 1 item"),
    ],
    ids=["duplicate-ids", "nan-reward", "inf-advantage", "no-outcome", "no-task", "unknown-field", "empty"],
)
def test_bad_groups_are_load_errors_naming_group_and_cause(tmp_path: Path, mutate, message: str) -> None:
    bad = group("bad")
    mutate(bad)
    path = tmp_path / "batch.jsonl"
    # JSON has no NaN; Python's json writes it as the common non-standard literal, which readers accept.
    path.write_text("\n".join(json.dumps(d) for d in (group("ok1"), bad, group("ok2"))) + "\n")
    loaded = load_groups([path])
    assert [type(item) for item in loaded] == [Group, LoadFailure, Group]
    error = loaded[1]
    assert error.group_id == "bad" and error.source == f"{path}:2"
    assert message in error.reason, error.reason


def test_invalid_json_lines_and_unreadable_files_do_not_sink_the_batch(tmp_path: Path) -> None:
    path = tmp_path / "batch.jsonl"
    path.write_text(json.dumps(group("ok1")) + "\n{truncated\n\n" + json.dumps(group("ok2")) + "\n")
    loaded = load_groups([path, tmp_path / "missing.jsonl"])
    assert [getattr(item, "group_id", None) for item in loaded] == ["ok1", "?", "ok2", "?"]
    assert "invalid JSON" in loaded[1].reason and "cannot read" in loaded[3].reason
    with pytest.raises(ValueError, match="invalid JSON"):
        load_group_file(path)


def test_array_object_and_jsonl_forms(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps([group("x"), group("y")]))
    (tmp_path / "o.json").write_text(json.dumps(group("z"), indent=2))
    (tmp_path / "l.jsonl").write_text(json.dumps(group("u")) + "\n" + json.dumps(group("v")) + "\n")
    ids = [g.group_id for g in load_groups([tmp_path / "a.json", tmp_path / "o.json", tmp_path / "l.jsonl"])]
    assert ids == ["x", "y", "z", "u", "v"]


def test_import_swebench(tmp_path: Path) -> None:
    instances = tmp_path / "instances.jsonl"
    instances.write_text(
        "\n".join(
            json.dumps(row)
            for row in [
                {
                    "instance_id": "o__r-1",
                    "repo": "o/r",
                    "base_commit": "c1" * 20,
                    "problem_statement": "bug 1",
                },
                {
                    "instance_id": "o__r-2",
                    "repo": "o/r",
                    "base_commit": "c2" * 20,
                    "problem_statement": "bug 2",
                },
                {
                    "instance_id": "o__r-3",
                    "repo": "o/r",
                    "base_commit": "c3" * 20,
                    "problem_statement": "nobody tried",
                },
            ]
        )
    )
    p1 = tmp_path / "sys1.jsonl"
    p1.write_text(
        "\n".join(
            json.dumps({"instance_id": i, "model_name_or_path": "sys1", "model_patch": f"p1-{i}"})
            for i in ("o__r-1", "o__r-2")
        )
    )
    p2 = tmp_path / "sys2.json"  # the dict-keyed form
    p2.write_text(json.dumps({"o__r-1": {"model_name_or_path": "sys2", "model_patch": "p2"}}))
    r1 = tmp_path / "r1.json"
    r1.write_text(json.dumps({"resolved_ids": ["o__r-1"], "unresolved_ids": ["o__r-2"]}))
    r2 = tmp_path / "r2.json"
    r2.write_text(json.dumps({"o__r-1": {"resolved": False}}))
    with pytest.raises(InputFileError, match=r"--repo-root .*repos: no such folder"):
        import_swebench(instances, [p1, p2], [r1, r2], repo_root=tmp_path / "repos")
    (tmp_path / "repos" / "r").mkdir(parents=True)  # the wrong layout: NAME, not OWNER/NAME
    run_git(tmp_path / "repos" / "r", "init", "-q")
    with pytest.raises(InputFileError, match=r"holds none of the 1 repositories needed \(o/r\) .* holds: r"):
        import_swebench(instances, [p1, p2], [r1, r2], repo_root=tmp_path / "repos")
    for layout in ("o__r", "o/r"):  # SWE-bench's layout is accepted; OWNER/NAME is the documented one
        (tmp_path / "repos" / layout).mkdir(parents=True)
        run_git(tmp_path / "repos" / layout, "init", "-q")
        groups = import_swebench(instances, [p1, p2], [r1, r2], repo_root=tmp_path / "repos")
        assert [g.group_id for g in groups] == ["o__r-1", "o__r-2"]
        first = groups[0]
        assert first.task.base_commit == "c1" * 20 and first.task.statement == "bug 1"
        assert first.task.repo == str(tmp_path / "repos" / layout)
    assert [(t.id, t.patch, t.passed) for t in first.trajectories] == [
        ("sys1", "p1-o__r-1", True),
        ("sys2", "p2", False),
    ]
    assert all(t.advantage is not None for t in first.trajectories)
    with pytest.raises(ValueError, match="pair them"):
        import_swebench(instances, [p1, p2], [r1])


def test_import_swebench_carries_the_environment(tmp_path: Path) -> None:
    """The recipe comes from the pinned swebench wheel's tables (fetched from PyPI once, then cached)."""
    test_patch = (
        "diff --git a/testing/test_mark.py b/testing/test_mark.py\n--- a/testing/test_mark.py\n"
        "+++ b/testing/test_mark.py\n@@ -1 +1,2 @@\n x\n+y\n"
        "diff --git a/testing/data.json b/testing/data.json\n"
    )
    # A test file the patch creates is in no target's tree: running it would stop pytest on every target.
    created = (
        "diff --git a/testing/test_new.py b/testing/test_new.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/testing/test_new.py\n@@ -0,0 +1 @@\n+def test_x(): pass\n"
    )
    rows = [
        {"instance_id": "p-1", "repo": "pytest-dev/pytest", "version": "5.4", "base_commit": "c1" * 20,
         "test_patch": test_patch},
        {"instance_id": "p-2", "repo": "pytest-dev/pytest", "version": "5.4", "base_commit": "c2" * 20,
         "image": "local/own:1"},
        {"instance_id": "p-3", "repo": "nobody/knows", "version": "1.0", "base_commit": "c3" * 20},
        {"instance_id": "p-4", "repo": "pytest-dev/pytest", "version": "5.4", "base_commit": "c4" * 20,
         "test_patch": created + test_patch},
        {"instance_id": "p-5", "repo": "pytest-dev/pytest", "version": "5.4", "base_commit": "c5" * 20,
         "test_patch": created},
    ]  # fmt: skip
    instances = tmp_path / "instances.json"
    instances.write_text(json.dumps(rows))
    preds = tmp_path / "p.jsonl"
    preds.write_text(
        "\n".join(json.dumps({"instance_id": r["instance_id"], "model_patch": "x"}) for r in rows)
    )
    results = tmp_path / "r.json"
    results.write_text(json.dumps({"resolved_ids": ["p-1"]}))
    first, own, unknown, mixed, only_new = (g.task for g in import_swebench(instances, [preds], [results]))
    assert first.python == "3.9" and first.image is None
    assert first.environment is not None and first.environment["repo"] == "pytest-dev/pytest"
    assert first.environment["version"] == "5.4" and first.environment["install"]
    assert first.environment["resolved_as_of"] == "2025-01-01T00:00:00Z"  # PyPI as the harness saw it
    assert first.test_command == "pytest -rA testing/test_mark.py"  # the data file is left out
    assert first.setup is not None and "egg_info" in first.setup  # stands in for `pip install -e .`
    assert own.image == "local/own:1" and own.test_command == "pytest -rA"
    assert unknown.environment is None and unknown.python is None and unknown.test_command is None
    assert unknown.setup is None
    assert mixed.test_command == "pytest -rA testing/test_mark.py"
    assert only_new.test_command is None and only_new.environment is not None
