"""Rankings: tie groups of trajectory ids, best first, and the checks one passes before it is used."""

from __future__ import annotations

from collections.abc import Sequence

from grader.errors import InvalidRanking

Ranking = Sequence[Sequence[str]]
"""Tie groups of trajectory ids, best first: the one ranking type (a validated one is a list of lists)."""


def check_ranking(ranking: object) -> Ranking:
    """Check a ranking's shape, whatever it ranks: non-empty tie groups of string ids, no id twice.

    Args:
        ranking: a decoded ranking, as a reference file or a cache gives it.

    Returns:
        The ranking, unchanged.

    Raises:
        InvalidRanking: it is not a list of lists of strings, a tie group is empty, or an id is listed more
            than once (the message names the ids).
    """
    seen = _ranked(ranking)
    if not all(isinstance(item, str) for tier in ranking for item in tier):  # type: ignore[union-attr]
        raise InvalidRanking("a ranking is a list of lists of ids (strings): tie groups, best first")
    duplicated = _duplicated(seen)
    if duplicated:
        raise InvalidRanking(f"ranked more than once: {', '.join(duplicated)}")
    return ranking  # type: ignore[return-value]


def validate_ranking(ranking: object, expected: list[str]) -> Ranking:
    """Return the ranking if it ranks every expected id exactly once in non-empty tie groups.

    Args:
        ranking: a decoded ranking (tie groups of ids, best first), as a grader returned it.
        expected: the ids it must rank, each once.

    Returns:
        The ranking with every id as a string.

    Raises:
        InvalidRanking: it is not a list of non-empty lists, or ids are unknown, ranked more than once or
            missing (the message names every problem).
    """
    seen = _ranked(ranking)
    problems = []
    unknown = sorted(set(seen) - set(expected))
    if unknown:
        problems.append(f"unknown: {', '.join(unknown)}")
    duplicated = _duplicated(seen)
    if duplicated:
        problems.append(f"ranked more than once: {', '.join(duplicated)}")
    missing = [item for item in expected if item not in seen]
    if missing:
        problems.append(f"missing: {', '.join(missing)}")
    if problems:
        raise InvalidRanking("; ".join(problems))
    return [[str(item) for item in tier] for tier in ranking]  # type: ignore[union-attr]


def _ranked(ranking: object) -> list[str]:
    """Every id of a list of non-empty tie groups, in order, as strings; raises InvalidRanking otherwise."""
    if not isinstance(ranking, list) or not all(isinstance(tier, list) for tier in ranking):
        raise InvalidRanking("a ranking is a list of lists of ids: tie groups, best first")
    seen: list[str] = []
    for position, tier in enumerate(ranking):
        if not tier:
            raise InvalidRanking(f"tie group {position + 1} is empty")
        seen.extend(str(item) for item in tier)
    return seen


def _duplicated(ids: list[str]) -> list[str]:
    return sorted({item for item in ids if ids.count(item) > 1})


def positions(ranking: Sequence[Sequence[str]]) -> dict[str, int]:
    """Tie-group index of each id (0 = best).

    Args:
        ranking: tie groups of ids, best first.

    Returns:
        Id -> the index of its tie group.

    Raises:
        ValueError: an id is listed twice.
    """
    rank: dict[str, int] = {}
    for index, tier in enumerate(ranking):
        for tid in tier:
            if tid in rank:
                raise ValueError(f"id {tid!r} appears more than once in the ranking")
            rank[tid] = index
    return rank


def expand_classes(class_ranking: Ranking, classes: dict[str, list[str]]) -> Ranking:
    """Turn a ranking of equivalence-class representatives into one of every member (members tie)."""
    return [
        [member for representative in tier for member in classes[representative]] for tier in class_ranking
    ]
