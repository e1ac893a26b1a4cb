"""Reference files: read, checked against their groups, and written.

`load_references` reads a JSON object from group id to a reference, or JSONL, one reference or one
preference per line (docs/benchmark.md shows every shape); every value is untrusted, and a malformed one is
an `InvalidReference` or `InputFileError` naming the file, the line, the group and the pair. The reference
itself (`Reference`, its kinds, its credit) is `grader.ranking.reference_model`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from grader.errors import InputFileError, InvalidRanking, InvalidReference
from grader.ranking.order import check_ranking
from grader.ranking.reference_model import PREFERENCE_KEYS, Preference, Reference, reference_from_ranking
from grader.util.atomic import write_text_atomic
from grader.util.jsontext import TooDeep, loads

__all__ = ["check_ids", "load_references", "preference_from_dict", "reference_from_dict", "write_references"]


def reference_from_dict(group_id: str, data: object) -> Reference:
    """Read one reference from decoded JSON: a ranking (list of tie groups) or an object with a kind.

    Args:
        group_id: the group it judges.
        data: a list (a ranking, the old `--reference` value) or {"kind", "preferences", "ranking",
            "details"} as `Reference.to_dict` writes it; a ranking alone fills in its preferences.

    Returns:
        The reference.

    Raises:
        InvalidReference: the shape is wrong, a key is unknown, or the reference is invalid (see
            `Reference`); the message names the group.
    """
    if isinstance(data, list):
        return reference_from_ranking(group_id, data)
    where = f"group {group_id!r}"
    if not isinstance(data, dict):
        raise InvalidReference(f"{where}: a reference is a ranking (list of tie groups) or an object")
    unknown = sorted(set(data) - {"kind", "preferences", "ranking", "details", "group_id"})
    if unknown:
        raise InvalidReference(f"{where}: unknown keys {', '.join(unknown)}")
    kind = data.get("kind", "ranking" if "ranking" in data else "pairwise")
    details = data.get("details") or {}
    if not isinstance(details, dict):
        raise InvalidReference(f"{where}: details must be an object")
    ranking = data.get("ranking")
    raw = data.get("preferences")
    if ranking is not None and not raw:
        return reference_from_ranking(group_id, ranking, kind=kind, details=details)
    if not isinstance(raw, list):
        raise InvalidReference(
            f"{where}: `preferences` must be a list of {{better, worse, reason, category}}"
        )
    preferences = tuple(preference_from_dict(group_id, item) for item in raw)
    if ranking is not None:
        try:
            check_ranking(ranking)
        except InvalidRanking as exc:
            raise InvalidReference(f"{where}: {exc}") from exc
        ranking = [list(tier) for tier in ranking]
    return Reference(group_id, kind, preferences, ranking=ranking, details=details)


def preference_from_dict(group_id: str, item: object) -> Preference:
    """Read one preference: {"better", "worse", "reason"?, "category"?}.

    Args:
        group_id: named in errors.
        item: the decoded object.

    Returns:
        The preference (checked in its reference, not here, for cycles).

    Raises:
        InvalidReference: not an object, a key missing or unknown, or a value of the wrong type.
    """
    where = f"group {group_id!r}"
    if not isinstance(item, dict):
        raise InvalidReference(f"{where}: a preference is an object with better and worse")
    unknown = sorted(set(item) - PREFERENCE_KEYS)
    if unknown:
        raise InvalidReference(f"{where}: a preference has unknown keys {', '.join(unknown)}")
    better, worse = item.get("better"), item.get("worse")
    if not isinstance(better, str) or not isinstance(worse, str):
        raise InvalidReference(f"{where}: a preference needs `better` and `worse` ids (strings): {item}")
    reason = item.get("reason", "")
    category = item.get("category")
    if not isinstance(reason, str) or (category is not None and not isinstance(category, str)):
        raise InvalidReference(f"{where}: pair {better} > {worse}: reason and category are strings")
    return Preference(better, worse, reason, category)  # type: ignore[arg-type]


def load_references(path: Path | str) -> dict[str, Reference]:
    """Read a reference file of any kind, validated.

    Two layouts. A JSON object from group id to a reference (a ranking, as the old `--reference` file
    holds, or an object as `Reference.to_dict` writes). Or JSONL, each line either a whole reference with
    its "group_id", or one preference {"group_id", "better", "worse", "reason"?, "category"?}; the
    preference lines of a group make one pairwise reference. A ranking's pairs are never made all at once
    (`RankingPairs`): memory stays that of the file.

    Args:
        path: the file.

    Returns:
        Group id -> reference, in file order.

    Raises:
        InputFileError: the file cannot be read, is neither a JSON object nor JSONL, or nests deeper than
            the JSON reader goes.
        InvalidReference: the file holds no reference, a reference is malformed, contradictory or cyclic, a
            key is given twice in one object (a group defined twice), or a group is defined twice across
            lines; the message names the file (and line), the group and the pair.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path}: cannot read the reference file: {exc}") from exc
    try:
        data = _decode(text, str(path))
    except json.JSONDecodeError:
        data = None
    if isinstance(data, dict) and not _is_line(data):
        references = {}
        for group_id, value in data.items():
            try:
                references[group_id] = reference_from_dict(group_id, value)
            except InvalidReference as exc:
                raise InvalidReference(f"{path}: {exc}") from exc
    else:
        references = _load_lines(path, text)
    if not references:
        raise InvalidReference(f"{path}: holds no reference (an empty file or object): nothing to score")
    return references


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A decoded JSON object, refusing a key given twice (json would keep the last one silently)."""
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateKey(key)
        data[key] = value
    return data


def _decode(text: str, where: str) -> Any:
    """JSON text decoded, with a key given twice or nesting past the reader's depth refused by name.

    Raises:
        json.JSONDecodeError: not JSON.
        InvalidReference: a key is given twice in one object.
        InputFileError: nested deeper than the JSON reader goes (Python's recursion limit).
    """
    try:
        return loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise InvalidReference(
            f"{where}: {exc.key!r} is given twice in one object (a group, or a field, defined twice)"
        ) from None
    except TooDeep as exc:
        raise InputFileError(f"{where}: {exc}: not a reference") from None


def check_ids(references: Mapping[str, Reference], groups: Mapping[str, Iterable[str]]) -> None:
    """Check that every reference names only trajectories of its group.

    Args:
        references: group id -> reference.
        groups: group id -> the group's trajectory ids; references of groups not given are not checked.

    Raises:
        InvalidReference: some references name ids their group lacks; the message names every such group
            and its unknown ids.
    """
    problems = []
    for group_id, reference in references.items():
        if group_id not in groups:
            continue
        unknown = sorted(reference.ids() - set(groups[group_id]))
        if unknown:
            shown = ", ".join(repr(tid) for tid in unknown[:20]) + (" ..." if len(unknown) > 20 else "")
            problems.append(f"group {group_id!r}: {len(unknown)} not in the group: {shown}")
    if problems:
        raise InvalidReference(
            "references name trajectories their group does not have: " + "; ".join(problems)
        )


def _is_line(data: dict[str, Any]) -> bool:
    """A one-line JSONL file (a single reference or preference) rather than a group-id object."""
    return isinstance(data.get("group_id"), str)


def _load_lines(path: Path | str, text: str) -> dict[str, Reference]:
    whole: dict[str, Reference] = {}
    pairs: dict[str, list[Preference]] = {}
    first_line: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = _decode(line, where)
        except json.JSONDecodeError as exc:
            raise InputFileError(
                f"{where}: neither a JSON object of references nor JSONL: {exc.msg}"
            ) from exc
        if not isinstance(item, dict) or not isinstance(item.get("group_id"), str):
            raise InvalidReference(f"{where}: a JSONL line is an object with a group_id")
        group_id = item["group_id"]
        try:
            if "better" in item or "worse" in item:
                if group_id in whole:
                    raise InvalidReference(
                        f"group {group_id!r} is already defined whole at line {first_line[group_id]}"
                    )
                pairs.setdefault(group_id, []).append(
                    preference_from_dict(group_id, {k: v for k, v in item.items() if k != "group_id"})
                )
            else:
                if group_id in whole or group_id in pairs:
                    raise InvalidReference(
                        f"group {group_id!r} is defined twice (first at line {first_line[group_id]})"
                    )
                whole[group_id] = reference_from_dict(group_id, item)
        except InvalidReference as exc:
            raise InvalidReference(f"{where}: {exc}") from exc
        first_line.setdefault(group_id, number)
    references = dict(whole)
    for group_id, preferences in pairs.items():
        try:
            references[group_id] = Reference(group_id, "pairwise", tuple(preferences))
        except InvalidReference as exc:
            raise InvalidReference(f"{path}: {exc}") from exc
    return {gid: references[gid] for gid in sorted(references, key=first_line.__getitem__)}


def write_references(references: Mapping[str, Reference], path: Path | str) -> Path:
    """Write references as a JSON object from group id to `Reference.to_dict()`; `load_references` reads it.

    Args:
        references: group id -> reference.
        path: the file to write (its folder is created).

    Returns:
        The path written.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {gid: reference.to_dict() for gid, reference in references.items()}
    write_text_atomic(out, json.dumps(data, indent=2) + "\n")
    return out
