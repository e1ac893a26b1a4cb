"""Reading group files, and importing SWE-bench-style predictions as groups.

A group file is one JSON object (a group), a JSON array of groups, or JSONL (one group a line). Loading never
stops at a bad group: each entry comes back either as a validated `Group` or as a `LoadError` that names the
entry and the cause, so one bad line never sinks its batch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from grader.atomic import write_lines_atomic
from grader.errors import InputFileError
from grader.models import DEFAULT_PASS_THRESHOLD, Group, Task, Trajectory, complete_group
from grader.sandbox.environments import tree_setup
from grader.sandbox.recipes import RecipeError, SpecTables, recipe_for, test_command_for

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadError:
    """An entry of a group file that is not a valid group."""

    source: str
    group_id: str
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: group {self.group_id!r}: {self.reason}"


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        parts.append(f"{where}: {error['msg']}" if where else error["msg"])
    return "; ".join(parts)


@dataclass(frozen=True)
class _Undecodable:
    """An entry that is not JSON, or nests deeper than the JSON reader goes; says why."""

    reason: str


def _decode(text: str) -> Any:
    """The JSON value of `text`, or `_Undecodable` with the reason (never an exception)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        return _Undecodable(f"invalid JSON: {exc}")
    except RecursionError:  # json recurses once per level: 100,000 brackets exhaust the stack
        return _Undecodable("invalid JSON: nested deeper than the JSON reader goes")


def _printable(text: str) -> str:
    """`text` with anything UTF-8 cannot encode (a lone surrogate) written as its escape, for messages.

    Args:
        text: an id or a reason, as read from a file.

    Returns:
        The same text where it encodes, else with `\\udXXX` escapes in place of what does not.
    """
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _entries(path: Path) -> Iterator[tuple[str, Any]]:
    """(location, decoded JSON or `_Undecodable`) for each entry in the file."""
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        items = _decode(text)
        if isinstance(items, _Undecodable):
            yield f"{path}", items
            return
        for i, item in enumerate(items):
            yield f"{path}[{i}]", item
        return
    if stripped.startswith("{"):
        whole = _decode(text)
        if not isinstance(whole, _Undecodable):
            yield f"{path}", whole
            return
        # not a single object: read it as JSONL
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield f"{path}:{number}", _decode(line)


def parse_group(
    data: Any, base_dir: Path | None = None, pass_threshold: float = DEFAULT_PASS_THRESHOLD
) -> Group:
    """Validate one decoded group and complete it (pass flags, GRPO advantages).

    A relative local `task.repo` is resolved against `base_dir`. Raises ValueError (pydantic's
    ValidationError is one) with the cause.
    """
    group = Group.model_validate(data)
    repo = group.task.repo
    if (
        base_dir is not None
        and "://" not in repo
        and not repo.startswith("git@")
        and not Path(repo).is_absolute()
    ):
        group = group.model_copy(
            update={"task": group.task.model_copy(update={"repo": str((base_dir / repo).resolve())})}
        )
    return complete_group(group, pass_threshold=pass_threshold)


def check_inputs(paths: Iterable[Path | str]) -> list[Path]:
    """The paths, once each is known to be a readable file. Raises InputFileError naming the first that
    is not (missing, a folder, unreadable), so a command can refuse before grading anything."""
    checked = []
    for path in map(Path, paths):
        if not path.exists():
            raise InputFileError(f"{path}: no such file")
        if not path.is_file():
            raise InputFileError(f"{path}: not a file")
        try:
            with open(path, "rb") as handle:
                handle.read(1)
        except OSError as exc:
            raise InputFileError(f"{path}: cannot be read: {exc.strerror or exc}") from None
        checked.append(path)
    return checked


def load_groups(
    paths: Iterable[Path | str], pass_threshold: float = DEFAULT_PASS_THRESHOLD
) -> list[Group | LoadError]:
    """Every entry of every file, in order, as a Group or a LoadError."""
    results: list[Group | LoadError] = []
    for path in map(Path, paths):
        try:
            entries = list(_entries(path))
        except (OSError, UnicodeDecodeError) as exc:
            results.append(LoadError(str(path), "?", f"cannot read: {exc}"))
            continue
        for location, data in entries:
            if isinstance(data, _Undecodable):
                results.append(LoadError(location, "?", data.reason))
                continue
            # An id UTF-8 cannot encode (a lone surrogate) fails its group; the error names it escaped.
            group_id = _printable(str(data.get("group_id", "?"))) if isinstance(data, dict) else "?"
            try:
                results.append(parse_group(data, base_dir=path.parent, pass_threshold=pass_threshold))
            except ValidationError as exc:
                results.append(LoadError(location, group_id, _describe(exc)))
            except ValueError as exc:
                results.append(LoadError(location, group_id, str(exc)))
    return results


def load_group_file(path: Path | str) -> list[Group]:
    """The groups of one file; raises ValueError listing every entry that is not a valid group."""
    loaded = load_groups([path])
    errors = [str(item) for item in loaded if isinstance(item, LoadError)]
    if errors:
        raise ValueError("; ".join(errors))
    return [item for item in loaded if isinstance(item, Group)]


def write_groups(groups: Iterable[Group], path: Path | str) -> int:
    """Write groups as JSONL, replacing `path` atomically (`grader.atomic`); returns how many.

    A group holding text UTF-8 cannot encode (a patch with a lone surrogate, which the pipeline marks and
    leaves out) is written with JSON's escapes, so it reads back the same.

    Raises OSError when the file cannot be written (`path` then keeps its previous content).
    """
    return write_lines_atomic(path, (_group_line(group) for group in groups))


def _group_line(group: Group) -> str:
    try:
        return group.model_dump_json(exclude_none=True)
    except PydanticSerializationError:
        return json.dumps(group.model_dump(mode="json", exclude_none=True))


# -- SWE-bench ----------------------------------------------------------------------------------------------


def _read_json_or_jsonl(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8").strip()
    if text.startswith("["):
        return list(json.loads(text))
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            pass
        else:
            # SWE-bench predictions may be one object keyed by instance id.
            if "instance_id" in data:
                return [data]
            return [dict(value, instance_id=key) for key, value in data.items() if isinstance(value, dict)]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _resolved_ids(path: Path) -> set[str]:
    """Resolved instance ids from a SWE-bench harness report (or a plain list of ids)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, list):
        return {str(x) for x in data}
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
    except RecipeError as exc:
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
    A trajectory's id is the prediction's `model_name_or_path` (else the file's stem). The task repository is
    `repo_root/<owner>__<name>` when `repo_root` is given, else `https://github.com/<owner>/<name>`.
    Instances no prediction covers are left out. Each task carries its environment (`swebench_environment`,
    read from `tables`, by default the pinned swebench package's).

    Raises:
        ValueError: the predictions and results files do not pair up, or a prediction names an instance the
            instances file lacks (the message names both files).
    """
    if len(predictions) != len(results):
        raise ValueError(f"{len(predictions)} predictions files but {len(results)} results files: pair them")
    by_instance = {row["instance_id"]: row for row in _read_json_or_jsonl(Path(instances))}
    trajectories: dict[str, list[Trajectory]] = {}
    for prediction_path, result_path in zip(map(Path, predictions), map(Path, results), strict=True):
        resolved = _resolved_ids(result_path)
        for row in _read_json_or_jsonl(prediction_path):
            instance_id = row["instance_id"]
            if instance_id not in by_instance:
                raise ValueError(f"{prediction_path}: instance {instance_id!r} is not in {instances}")
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
    groups = []
    for instance_id, trajs in trajectories.items():
        instance = by_instance[instance_id]
        owner_name = instance["repo"]
        repo = (
            str(Path(repo_root) / owner_name.replace("/", "__"))
            if repo_root is not None
            else f"https://github.com/{owner_name}"
        )
        task = Task(
            repo=repo,
            base_commit=instance["base_commit"],
            statement=instance.get("problem_statement", ""),
            image=instance.get("image"),
            **swebench_environment(instance, tables),
        )
        groups.append(complete_group(Group(group_id=instance_id, task=task, trajectories=trajs)))
    return groups
