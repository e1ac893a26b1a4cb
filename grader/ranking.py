"""Rankings: tie groups of trajectory ids, best first, and the checks one passes before it is used."""

from __future__ import annotations

from grader.errors import InvalidRanking

Ranking = list[list[str]]


def validate_ranking(ranking: Ranking, expected: list[str]) -> Ranking:
    """Return the ranking if it ranks every expected id exactly once in non-empty tie groups.

    Raises InvalidRanking naming the unknown, duplicated or missing ids, or the empty tie group.
    """
    if not isinstance(ranking, list) or not all(isinstance(tier, list) for tier in ranking):
        raise InvalidRanking("a ranking is a list of tie groups, each a list of ids")
    seen: list[str] = []
    for position, tier in enumerate(ranking):
        if not tier:
            raise InvalidRanking(f"tie group {position + 1} is empty")
        seen.extend(str(item) for item in tier)
    problems = []
    unknown = sorted(set(seen) - set(expected))
    if unknown:
        problems.append(f"unknown: {', '.join(unknown)}")
    duplicated = sorted({item for item in seen if seen.count(item) > 1})
    if duplicated:
        problems.append(f"ranked more than once: {', '.join(duplicated)}")
    missing = [item for item in expected if item not in seen]
    if missing:
        problems.append(f"missing: {', '.join(missing)}")
    if problems:
        raise InvalidRanking("; ".join(problems))
    return [[str(item) for item in tier] for tier in ranking]


def expand_classes(class_ranking: Ranking, classes: dict[str, list[str]]) -> Ranking:
    """Turn a ranking of equivalence-class representatives into one of every member (members tie)."""
    return [
        [member for representative in tier for member in classes[representative]] for tier in class_ranking
    ]
