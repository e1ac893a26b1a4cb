"""Reading group files, and importing SWE-bench-style predictions as groups.

A group file is one JSON object (a group), a JSON array of groups, or JSONL (one group a line). Loading never
stops at a bad group: each entry comes back either as a validated `Group` or as a `LoadFailure` that names the
entry and the cause, so one bad line never sinks its batch. An entry in which an object gives a key twice is
refused, the key named (JSON readers keep the last one silently), and a task's repository and base commit are
checked before git sees them (`grader.util.untrusted`: no option, no remote helper, no revision syntax).
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

from grader.errors import InputFileError
from grader.groups.models import DEFAULT_PASS_THRESHOLD, Group, complete_group
from grader.util.atomic import write_lines_atomic
from grader.util.jsontext import loads
from grader.util.untrusted import repository_location, revision

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadFailure:
    """An entry of a group file that is not a valid group: a result of loading, returned in place of the group
    (not raised), so one bad entry costs only itself. Formerly `LoadError` (an alias kept for
    old imports, deprecated)."""

    source: str
    group_id: str
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: group {self.group_id!r}: {self.reason}"


# Deprecated: the old name, for imports written before the rename (`grader.LoadError` warns).
LoadError = LoadFailure


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


class _KeyedTwice(dict):
    """A decoded object that gave `repeated` twice (the last value kept, as JSON readers do)."""

    repeated: str = ""


def _mark_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An `object_pairs_hook` that marks an object giving a key twice rather than raising, so one entry of an
    array with a repeated key fails alone."""
    found = dict(pairs)
    if len(found) == len(pairs):
        return found
    seen: set[str] = set()
    marked = _KeyedTwice(found)
    marked.repeated = next(key for key, _ in pairs if key in seen or seen.add(key))  # type: ignore[func-returns-value]
    return marked


def _repeated_key(value: Any) -> str | None:
    """The first key given twice in any object of a decoded value, or None (walked without recursion: the
    value may nest as deep as the reader goes)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _KeyedTwice):
            return item.repeated
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None


def _decode(text: str) -> Any:
    """The JSON value of `text`, or `_Undecodable` with the reason (never an exception)."""
    try:
        return loads(text, object_pairs_hook=_mark_repeats)
    except ValueError as exc:
        return _Undecodable(f"invalid JSON: {exc}")


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
    ValidationError is one) with the cause: also for an object that gives a key twice, a `task.repo` that is
    an option or a remote helper, and a `task.base_commit` that is not a commit id, branch or tag (the last
    two as `UnsafeValue`).
    """
    repeated = _repeated_key(data)
    if repeated is not None:
        raise ValueError(f"key {repeated!r} appears twice in one object")
    group = Group.model_validate(data)
    repository_location(group.task.repo, "task.repo")
    revision(group.task.base_commit, "task.base_commit")
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
) -> list[Group | LoadFailure]:
    """Every entry of every file, in order, as a Group or a LoadFailure."""
    results: list[Group | LoadFailure] = []
    for path in map(Path, paths):
        try:
            entries = list(_entries(path))
        except (OSError, UnicodeDecodeError) as exc:
            results.append(LoadFailure(str(path), "?", f"cannot read: {exc}"))
            continue
        for location, data in entries:
            if isinstance(data, _Undecodable):
                results.append(LoadFailure(location, "?", data.reason))
                continue
            # An id UTF-8 cannot encode (a lone surrogate) fails its group; the error names it escaped.
            group_id = _printable(str(data.get("group_id", "?"))) if isinstance(data, dict) else "?"
            try:
                results.append(parse_group(data, base_dir=path.parent, pass_threshold=pass_threshold))
            except ValidationError as exc:
                results.append(LoadFailure(location, group_id, _describe(exc)))
            except ValueError as exc:
                results.append(LoadFailure(location, group_id, str(exc)))
    return results


def load_group_file(path: Path | str) -> list[Group]:
    """The groups of one file; raises ValueError listing every entry that is not a valid group."""
    loaded = load_groups([path])
    errors = [str(item) for item in loaded if isinstance(item, LoadFailure)]
    if errors:
        raise ValueError("; ".join(errors))
    return [item for item in loaded if isinstance(item, Group)]


def write_groups(groups: Iterable[Group], path: Path | str) -> int:
    """Write groups as JSONL, replacing `path` atomically (`grader.util.atomic`); returns how many.

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
