"""From a trainer's rows to gagar groups, through a declared mapping that names where each field is found.

A *row* is one sampled trajectory as the training framework holds it (a dict, a dataset row, an object):
which group (prompt) it belongs to, its id within the group, its patch, its pass flag, its response length,
and the task of its dataset row (repository, base commit, statement, image). A :class:`RowMapping` says
where each of these is found: a key path (``"extra_info.repo"``: keys or attributes, dots between) or a
function of the row. :func:`parse_rows` reads every row once:

- a missing or malformed group id, trajectory id, pass flag or response length is a :class:`RowError` that
  names the row and the field (a wrong mapping is the trainer author's bug and must stop the step early);
- a missing or invalid patch (on a passing row) or task is not an error: the row's group is *ungraded*, its
  rows keep weight 1.0, and the reason names the row and the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from pydantic import ValidationError

from grader.errors import GagarError
from grader.groups.models import Group, Task, Trajectory, complete_group

__all__ = [
    "MappingError",
    "ParsedRow",
    "RowError",
    "RowGroup",
    "RowMapping",
    "group_rows",
    "parse_rows",
    "task_paths",
]

FieldSpec = str | Callable[[Any], Any]
"""Where a field is found: a key path (keys or attributes, dots between) or a function of the row."""

_MISSING = object()
TASK_FIELDS = ("repo", "base_commit", "statement", "image")


class MappingError(GagarError, ValueError):
    """A row mapping that cannot work: a required field left out, or a field neither path nor function."""


class RowError(GagarError, ValueError):
    """A row whose required field is missing or malformed; names the row, the field and where it was read."""


@dataclass(frozen=True)
class RowMapping:
    """Where each field of a training row is found. Every field is a key path or a function of the row."""

    group_id: FieldSpec = "group_id"
    """The row's group (the prompt it was sampled for); rows sharing it are graded together."""
    trajectory_id: FieldSpec = "trajectory_id"
    """The row's id within its group (unique there)."""
    passed: FieldSpec = "passed"
    """Whether the row passed its tests: a bool, or a number that is 0 or 1."""
    patch: FieldSpec = "patch"
    """The row's final patch (a unified diff); missing on a passing row leaves its group ungraded."""
    response_length: FieldSpec | None = "response_length"
    """The response length in tokens (optional; kept on the trajectory for token preservation, monitors)."""
    task: FieldSpec | None = None
    """The whole task (a `Task` or a dict of its fields), when the row holds it in one place; else the four
    fields below are read one by one."""
    repo: FieldSpec | None = "repo"
    """The task's repository (path or URL)."""
    base_commit: FieldSpec | None = "base_commit"
    """The task's base commit."""
    statement: FieldSpec | None = "statement"
    """The task's problem statement (optional)."""
    image: FieldSpec | None = "image"
    """The task's sandbox image (optional)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            spec = getattr(self, f.name)
            if spec is None:
                if f.name in ("group_id", "trajectory_id", "passed", "patch"):
                    raise MappingError(f"row mapping: {f.name} is required (a key path or a function)")
                continue
            if not (callable(spec) or (isinstance(spec, str) and spec.strip(".") and ".." not in spec)):
                raise MappingError(f"row mapping: {f.name} is {spec!r}, neither a key path nor a function")
        if self.task is None and (self.repo is None or self.base_commit is None):
            raise MappingError("row mapping: give either task, or repo and base_commit")

    def read(self, row: Any, name: str) -> Any:
        """The value of field `name` in `row`, or the module's missing marker when it is absent.

        Args:
            row: one training row.
            name: a field of this mapping.
        Returns:
            the value found (``None`` values count as absent).
        Raises:
            RowError: the field's function raised (the message names the field and the exception).
        """
        spec = getattr(self, name)
        if spec is None:
            return _MISSING
        if callable(spec):
            try:
                value = spec(row)
            except Exception as exc:  # the user's function: say which field's function failed, and how
                raise RowError(f"{name} (function {_spec_name(spec)}): {type(exc).__name__}: {exc}") from exc
        else:
            value = row
            for key in spec.split("."):
                value = _step(value, key)
                if value is _MISSING:
                    break
        return _MISSING if value is None else value

    def where(self, name: str) -> str:
        """How field `name` is read, for messages: ``'path extra_info.repo'`` or ``'function f'``."""
        spec = getattr(self, name)
        return f"function {_spec_name(spec)}" if callable(spec) else f"path {spec!r}"


def task_paths(prefix: str) -> dict[str, str]:
    """Key paths of the task's fields under one place of the row, as `RowMapping` keyword arguments.

    Args:
        prefix: where the task's fields are, e.g. ``"extra_info"``.
    Returns:
        ``{"repo": "<prefix>.repo", "base_commit": ..., "statement": ..., "image": ...}``.
    """
    return {name: f"{prefix}.{name}" for name in TASK_FIELDS}


def _spec_name(spec: Callable[[Any], Any]) -> str:
    return getattr(spec, "__qualname__", None) or repr(spec)


def _step(value: Any, key: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(key, _MISSING)
    if isinstance(value, Sequence) and not isinstance(value, str) and key.lstrip("-").isdigit():
        index = int(key)
        return value[index] if -len(value) <= index < len(value) else _MISSING
    return getattr(value, key, _MISSING)


@dataclass
class ParsedRow:
    """One row as gagar reads it; `problem` says why its group cannot be graded (None: nothing wrong)."""

    index: int
    group_id: str
    trajectory_id: str
    passed: bool
    patch: str | None
    response_length: int | None
    task: Task | None
    problem: str | None = None


@dataclass
class RowGroup:
    """The rows of one group, in row order, and the group built from them (None when it cannot be graded)."""

    group_id: str
    rows: list[ParsedRow]
    group: Group | None
    problem: str | None = None
    keys: list[tuple[str, str]] = field(default_factory=list)


def _flag(value: Any, row: int, where: str) -> bool:
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if number in (0.0, 1.0):
        return number == 1.0
    raise RowError(f"row {row}: passed ({where}) is {value!r}, not a pass flag (bool, or 0 or 1)")


def _length(value: Any, row: int, where: str) -> int | None:
    if value is _MISSING:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not (math.isfinite(number) and number >= 0 and number == int(number)):  # int(inf) would raise
        raise RowError(f"row {row}: response_length ({where}) is {value!r}, not a count of tokens")
    return int(number)


def _task(mapping: RowMapping, row: Any, index: int) -> tuple[Task | None, str | None]:
    if mapping.task is not None:
        value = mapping.read(row, "task")
        if value is _MISSING:
            return None, f"row {index}: no task ({mapping.where('task')} is missing)"
        if isinstance(value, Task):
            return value, None
        data = value
    else:
        data = {}
        for name in TASK_FIELDS:
            value = mapping.read(row, name)
            if value is not _MISSING:
                data[name] = value
        for name in ("repo", "base_commit"):
            if name not in data:
                return None, f"row {index}: no task ({name}: {mapping.where(name)} is missing)"
    try:
        return Task.model_validate(data), None
    except ValidationError as exc:
        first = exc.errors()[0]
        place = ".".join(str(p) for p in first["loc"]) or "task"
        return None, f"row {index}: invalid task: {place}: {first['msg']}"


def parse_rows(rows: Sequence[Any], mapping: RowMapping) -> list[ParsedRow]:
    """Read every row through `mapping`.

    Args:
        rows: the trainer's rows, in its order.
        mapping: where each field is found.
    Returns:
        one `ParsedRow` per row, in the same order; a row whose patch or task cannot be read carries the
        reason in `problem` instead of raising.
    Raises:
        RowError: a group id, trajectory id, pass flag or response length is missing or malformed (a
            length that is not a finite count of tokens), reading the row raised (a property, a `__str__`),
            or two rows share a group and trajectory id; the message names the row(s) and the field.
    """
    parsed: list[ParsedRow] = []
    seen: dict[tuple[str, str], int] = {}
    for index, row in enumerate(rows):
        try:
            ids = {}
            for name in ("group_id", "trajectory_id"):
                value = mapping.read(row, name)
                if value is _MISSING or str(value) == "":
                    raise RowError(f"row {index}: {name} ({mapping.where(name)}) is missing")
                ids[name] = str(value)
            value = mapping.read(row, "passed")
            if value is _MISSING:
                raise RowError(f"row {index}: passed ({mapping.where('passed')}) is missing")
            passed = _flag(value, index, mapping.where("passed"))
            length = _length(mapping.read(row, "response_length"), index, mapping.where("response_length"))
            patch, problem = mapping.read(row, "patch"), None
            if patch is _MISSING:
                patch = None
                if passed:
                    problem = f"row {index}: no patch ({mapping.where('patch')} is missing)"
            elif not isinstance(patch, str):
                problem, patch = f"row {index}: patch is a {type(patch).__name__}, not text", None
            task, task_problem = _task(mapping, row, index)
        except RowError as exc:
            if str(exc).startswith("row "):
                raise
            raise RowError(f"row {index}: {exc}") from exc
        except Exception as exc:  # the row's own code (a property, __str__) failed: name the row, not a trace
            raise RowError(f"row {index}: cannot be read: {type(exc).__name__}: {exc}") from exc
        key = (ids["group_id"], ids["trajectory_id"])
        if key in seen:
            raise RowError(
                f"rows {seen[key]} and {index}: both are trajectory {key[1]!r} of group {key[0]!r}"
            )
        seen[key] = index
        parsed.append(ParsedRow(index, key[0], key[1], passed, patch, length, task, problem or task_problem))
    return parsed


def group_rows(parsed: Sequence[ParsedRow]) -> list[RowGroup]:
    """Gather parsed rows into groups (first appearance order) and build each gradable group.

    A group is left unbuilt, with the reason, when one of its rows has a problem, its rows disagree on
    the task, or its ids are not text (a lone surrogate). Each trajectory keeps its row's response length,
    and ``metadata["row"]`` its row index.

    Args:
        parsed: rows from `parse_rows`.
    Returns:
        one `RowGroup` per group id.
    """
    by_group: dict[str, list[ParsedRow]] = {}
    for row in parsed:
        by_group.setdefault(row.group_id, []).append(row)
    out = []
    for group_id, members in by_group.items():
        keys = [(group_id, r.trajectory_id) for r in members]
        problems = [r.problem for r in members if r.problem]
        if problems:
            out.append(RowGroup(group_id, members, None, "; ".join(problems), keys))
            continue
        task = members[0].task
        other = next((r for r in members if r.task != task), None)
        if other is not None:
            reason = f"rows {members[0].index} and {other.index} of group {group_id!r} disagree on the task"
            out.append(RowGroup(group_id, members, None, reason, keys))
            continue
        try:
            trajectories = [
                Trajectory(
                    id=r.trajectory_id,
                    patch=r.patch or "",
                    passed=r.passed,
                    response_length=r.response_length,
                    metadata={"row": r.index, "response_length": r.response_length},
                )
                for r in members
            ]
            group = complete_group(Group(group_id=group_id, task=task, trajectories=trajectories))
        except ValidationError as exc:  # an id that is not text (a lone surrogate): this group only
            first = exc.errors()[0]
            place = ".".join(str(p) for p in first["loc"])
            rows = ", ".join(str(r.index) for r in members)
            reason = f"rows {rows} of group {group_id!r} do not make a group: {place}: {first['msg']}"
            out.append(RowGroup(group_id, members, None, reason, keys))
            continue
        out.append(RowGroup(group_id, members, group, None, keys))
    return out
