"""A recipe of pointers into two real git repositories built for the test (`gagar bench prepare`'s tests, the
labelling tool's and the hostile recipes'; `sources` is the fixture, `build_recipe_sources` the function).

A data source (acme/runs: three runs' prediction files, their harness reports and the dataset rows,
committed) and a task repository (acme/widget: two base commits); the recipe points at them by commit, path
and sha256, as benchmarks/swebench-lite does at its public sources.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grader.evaluation.recipe import sha256_bytes, sha256_text
from grader.workspace.gitcmd import git
from grader.workspace.gitcmd import out as git_out

DATA = "acme/runs"
TASK = "acme/widget"


def commit_all(repo: Path, message: str) -> str:
    git(["add", "-A"], cwd=repo)
    git(["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message], cwd=repo)
    return git_out(["rev-parse", "HEAD"], cwd=repo)


def patch_for(value: str) -> str:
    return (
        "diff --git a/widget.py b/widget.py\n--- a/widget.py\n+++ b/widget.py\n@@ -1 +1 @@\n"
        f"-VALUE = 0\n+VALUE = {value}\n"
    )


def build_recipe_sources(tmp_path: Path) -> dict[str, Any]:
    """A source root holding acme/runs and acme/widget under `tmp_path`, and a recipe pointing into them.

    Returns:
        {"root": the source root, "recipe": the recipe folder, "data": acme/runs, "task": acme/widget,
        "commit": the commit of acme/runs the pointers name}.
    """
    root = tmp_path / "sources"
    task = root / "acme" / "widget"
    task.mkdir(parents=True)
    git(["init", "-q", str(task)])
    (task / "widget.py").write_text("VALUE = 0\n")
    bases = [commit_all(task, "base one")]
    (task / "README").write_text("two\n")
    bases.append(commit_all(task, "base two"))
    data = root / "acme" / "runs"
    data.mkdir(parents=True)
    git(["init", "-q", str(data)])
    instances = ["acme__widget-1", "acme__widget-2"]
    patches = {
        "run-a": {instances[0]: patch_for("1"), instances[1]: patch_for("2")},
        "run-b": {instances[0]: patch_for("10"), instances[1]: patch_for("20")},
        "run-c": {instances[0]: patch_for("1  # also one")},
    }
    resolved = {"run-a": [instances[0]], "run-b": [instances[1]], "run-c": [instances[0]]}
    for run in patches:
        (data / run).mkdir()
        (data / run / "preds.jsonl").write_text(
            "".join(json.dumps({"instance_id": i, "model_patch": p}) + "\n" for i, p in patches[run].items())
        )
        (data / run / "report.json").write_text(json.dumps({"resolved": resolved[run], "applied": instances}))
    (data / "rows").mkdir()
    for instance, base in zip(instances, bases, strict=True):
        row = {"instance_id": instance, "repo": TASK, "base_commit": base, "problem_statement": "set VALUE"}
        (data / "rows" / f"{instance}.json").write_text(json.dumps({"task_info": row}))
    commit = commit_all(data, "runs")

    def pointer(path: str, fmt: str) -> dict[str, str]:
        sha = sha256_bytes((data / path).read_bytes())
        return {"repository": DATA, "commit": commit, "path": path, "sha256": sha, "format": fmt}

    recipe = tmp_path / "recipe"
    recipe.mkdir()
    files = {}
    for run in patches:
        files[f"{run}/predictions"] = pointer(f"{run}/preds.jsonl", "predictions-jsonl")
        files[f"{run}/report"] = pointer(f"{run}/report.json", "swebench-report")
    manifest = {
        "name": "tiny-recipe",
        "recipe": 1,
        "sources": [
            {"repository": DATA, "licence": "MIT", "what": "runs"},
            {"repository": TASK, "licence": "MIT", "what": "task"},
        ],
        "runs": {run: {"predictions": f"{run}/predictions", "report": f"{run}/report"} for run in patches},
        "files": files,
    }
    (recipe / "recipe.json").write_text(json.dumps(manifest))
    lines = [
        {
            "instance": i,
            "repository": TASK,
            "base_commit": b,
            "row": pointer(f"rows/{i}.json", "acr-meta"),
        }
        for i, b in zip(instances, bases, strict=True)
    ]
    (recipe / "instances.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    candidates = [
        {"instance": i, "run": run, "sha256": sha256_text(p), "resolved": i in resolved[run]}
        for run in patches
        for i, p in patches[run].items()
    ]
    (recipe / "candidates.jsonl").write_text("".join(json.dumps(c) + "\n" for c in candidates))
    (recipe / "split.json").write_text(json.dumps({"dev": [instances[0]], "test": [instances[1]]}))
    return {"root": root, "recipe": recipe, "data": data, "task": task, "commit": commit}


@pytest.fixture
def sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A source root holding acme/runs and acme/widget, and a recipe pointing into them; the data cache in
    `tmp_path`."""
    monkeypatch.setenv("GAGAR_CACHE", str(tmp_path / "cache"))
    return build_recipe_sources(tmp_path)
