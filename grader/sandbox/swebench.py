"""Importing SWE-bench: instances, predictions and harness reports become groups whose tasks carry their
environment (interpreter, install recipe, test command) from `recipes`.

Beside `recipes` and `environments`, which it needs, so that `formats` (the input floor) loads no
sandbox code. An instance's `repo` becomes a path under `--repo-root` or a clone URL and its `base_commit`
a git argument: both are checked (`grader.util.untrusted`), and a bad one is refused naming the file, the
instance and the field.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from grader.errors import InputFileError
from grader.groups.models import Group, Task, Trajectory, complete_group
from grader.sandbox.environments import tree_setup
from grader.sandbox.recipes import InstallRecipeError, SpecTables, recipe_for, test_command_for
from grader.util.jsontext import loads
from grader.util.untrusted import UnsafeValue, commit_id, repository_name
from grader.workspace.sources import check_source_root

log = logging.getLogger(__name__)


def _read_json_or_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSON list, a JSON object (one row, or rows keyed by instance id) or JSONL.

    Raises:
        InputFileError: the text is not JSON (the file and line named), or a row is not an object with an
            `instance_id` string.
    """
    text = path.read_text(encoding="utf-8").strip()
    rows: list[Any]
    try:
        if text.startswith("["):
            rows = list(loads(text))
        elif text.startswith("{") and isinstance(data := _whole(text), dict):
            # SWE-bench predictions may be one object keyed by instance id.
            if "instance_id" in data:
                rows = [data]
            else:
                keyed = [(key, value) for key, value in data.items() if isinstance(value, dict)]
                rows = [dict(value, instance_id=key) for key, value in keyed]
        else:
            rows = [loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as exc:
        raise InputFileError(f"{path}: not JSON or JSONL: {exc}") from None
    for n, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str) or not row["instance_id"]:
            raise InputFileError(f"{path}: row {n + 1}: expected an object with an `instance_id` string")
    return rows


def _whole(text: str) -> Any:
    """`text` as one JSON value, or None when it is not one (JSONL, say)."""
    try:
        return loads(text)
    except ValueError:
        return None


def _checked_instance(row: dict[str, Any], where: str) -> dict[str, Any]:
    """An instance row whose `repo` is OWNER/NAME and `base_commit` a full commit id. Raises InputFileError
    naming `where`, the instance and the field."""
    instance = f"{where}: instance {row['instance_id']!r}"
    try:
        repository_name(row.get("repo"), f"{instance}: repo")
        commit_id(row.get("base_commit"), f"{instance}: base_commit")
    except UnsafeValue as exc:
        raise InputFileError(str(exc)) from None
    return row


def _resolved_ids(path: Path) -> set[str]:
    """Resolved instance ids from a SWE-bench harness report (or a plain list of ids)."""
    try:
        data = loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InputFileError(f"{path}: not a JSON harness report: {exc}") from None
    if isinstance(data, list):
        return {str(x) for x in data}
    if not isinstance(data, dict):
        raise InputFileError(f"{path}: not a harness report: expected a JSON object or list")
    for key in ("resolved_ids", "resolved"):
        if isinstance(data.get(key), list):
            return {str(x) for x in data[key]}
    # Per-instance reports: {"instance_id": {"resolved": true, ...}, ...}
    return {key for key, value in data.items() if isinstance(value, dict) and value.get("resolved")}


def swebench_environment(instance: dict[str, Any], tables: SpecTables | None = None) -> dict[str, Any]:
    """The environment fields of an instance's task: interpreter, install recipe and test command.

    The recipe comes from swebench's own specification tables for the instance's (repo, version); the test
    command runs the test files its `test_patch` touches, as SWE-bench's harness does. An instance the tables
    do not know keeps no environment (its `run` uses the default image) rather than failing the import.

    Args:
        instance: one SWE-bench instance row (`repo`, `version`, `test_patch`).
        tables: the specification tables; None reads the pinned swebench wheel (fetched with pip once).

    Returns:
        Keyword arguments for `Task`: `python`, `environment`, `test_command`, `setup` (empty when unknown).
    """
    if not instance.get("version"):
        return {}
    try:
        recipe = recipe_for(instance["repo"], str(instance["version"]), tables)
    except InstallRecipeError as exc:
        log.warning("instance %s: no environment: %s", instance.get("instance_id"), exc)
        return {}
    return {
        "python": recipe.python or None,
        "environment": recipe.to_dict(),
        "test_command": test_command_for(recipe, instance.get("test_patch") or "") or None,
        "setup": tree_setup(recipe.version) if recipe.install else None,
    }


def import_swebench(
    instances: Path | str,
    predictions: list[Path | str],
    results: list[Path | str],
    repo_root: Path | str | None = None,
    tables: SpecTables | None = None,
) -> list[Group]:
    """One group per instance, one trajectory per predictions file that has that instance.

    `predictions[i]` pairs with `results[i]` (the harness report whose resolved ids say what passed).
    A trajectory's id is the prediction's `model_name_or_path` (else the file's stem). The task repository
    is its git copy in `repo_root` when given (`repo_root/OWNER/NAME`, or `OWNER__NAME`:
    grader.workspace.sources), else `https://github.com/OWNER/NAME`.
    Instances no prediction covers are left out. Each task carries its environment (`swebench_environment`,
    read from `tables`, by default the pinned swebench package's).

    Raises:
        InputFileError: (a ValueError) the predictions and results files do not pair up, a prediction
            names an instance the instances file lacks (the message names both files), a file is not JSON,
            an instance's `repo` is not OWNER/NAME or its `base_commit` not 40 hex digits (named), or
            `repo_root` lacks a repository the instances need (the message names each and the layout).
    """
    if len(predictions) != len(results):
        raise InputFileError(
            f"{len(predictions)} predictions files but {len(results)} results files: pair them"
        )
    rows = _read_json_or_jsonl(Path(instances))
    by_instance = {row["instance_id"]: _checked_instance(row, str(instances)) for row in rows}
    trajectories: dict[str, list[Trajectory]] = {}
    for prediction_path, result_path in zip(map(Path, predictions), map(Path, results), strict=True):
        resolved = _resolved_ids(result_path)
        for row in _read_json_or_jsonl(prediction_path):
            instance_id = row["instance_id"]
            if instance_id not in by_instance:
                raise InputFileError(f"{prediction_path}: instance {instance_id!r} is not in {instances}")
            system = str(row.get("model_name_or_path") or prediction_path.stem)
            taken = {t.id for t in trajectories.get(instance_id, [])}
            if system in taken:  # two files from one system: keep both, told apart by file
                system = f"{system}@{prediction_path.stem}"
            trajectories.setdefault(instance_id, []).append(
                Trajectory(
                    id=system,
                    patch=row.get("model_patch") or "",
                    passed=instance_id in resolved,
                    metadata={"predictions_file": str(prediction_path)},
                )
            )
    local = _local_copies(repo_root, {by_instance[i]["repo"] for i in trajectories}) if repo_root else {}
    groups = []
    for instance_id, trajs in trajectories.items():
        instance = by_instance[instance_id]
        owner_name = instance["repo"]
        repo = str(local[owner_name]) if repo_root is not None else f"https://github.com/{owner_name}"
        task = Task(
            repo=repo,
            base_commit=instance["base_commit"],
            statement=instance.get("problem_statement", ""),
            image=instance.get("image"),
            **swebench_environment(instance, tables),
        )
        groups.append(complete_group(Group(group_id=instance_id, task=task, trajectories=trajs)))
    return groups


def _local_copies(repo_root: Path | str, repositories: set[str]) -> dict[str, Path]:
    """Each OWNER/NAME's git copy under `repo_root`; InputFileError naming every one that is not there."""
    root = Path(repo_root)
    found = check_source_root(root, repositories, "--repo-root")
    missing = sorted(repositories - set(found))
    if missing:
        raise InputFileError(
            f"--repo-root {root}: no git copy of {', '.join(missing)} (looked for {root}/OWNER/NAME and "
            f"{root}/OWNER__NAME)"
        )
    return found
