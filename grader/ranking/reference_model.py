"""References: what "better" means for a group, one type for every source of it, and a ranking's credit.

A reference is a set of preferences, each `better` over `worse` (trajectory ids) with an optional reason and
category, that form a partial order: no pair both ways, no cycle. Four kinds make one:

- `pairwise`: preferences written down one by one (a benchmark's labelled pairs);
- `ranking`: a full ranking (tie groups, best first; the old `--reference` file); its strict pairs are the
  preferences, and Kendall's tau is computable because the ranking is kept;
- `degrade`: `gagar degrade` output, known by construction (the clean patch over its variants, milder
  variants over worse ones);
- `consensus`: K gradings under fresh label permutations, keeping the pairs at least `threshold` of them
  order the same way.

A grader is scored over the pairs the reference defines whose two ids it ranked: 1 per pair in the
reference's order, 0.5 per pair it ties (`reference_credit`). Pure functions, nothing else: no grading, no
workspace, no files (`grader.ranking.reference_files` reads and writes them; `grader.ranking.references`
has the names of both).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from grader.errors import InvalidRanking, InvalidReference
from grader.groups.models import Group
from grader.ranking.order import Ranking, check_ranking, positions

Category = Literal["correctness", "behaviour", "scope", "design", "tests", "hygiene"]
CATEGORIES: tuple[str, ...] = get_args(Category)
Kind = Literal["pairwise", "ranking", "degrade", "consensus"]
KINDS: tuple[str, ...] = get_args(Kind)

# What each `gagar degrade` kind spoils, in the benchmark's categories: a variant's pairs are filed under
# the category of the worse side's defect.
DEGRADE_CATEGORY: dict[str, Category] = {
    "reformat_unrelated": "scope",
    "needless_refactor": "design",
    "dead_code": "hygiene",
    "debug_output": "behaviour",
    "leftover_script": "hygiene",
    "swallowed_exception": "behaviour",
    "test_edit": "tests",
}
PREFERENCE_KEYS = frozenset({"better", "worse", "reason", "category"})


@dataclass(frozen=True)
class Preference:
    """One judgement: trajectory `better` is better than trajectory `worse`."""

    better: str
    """The better trajectory's id."""
    worse: str
    """The worse trajectory's id."""
    reason: str = ""
    """Why, in one sentence."""
    category: Category | None = None
    """What the difference is about: correctness, behaviour, scope, design, tests or hygiene."""

    @property
    def pair(self) -> tuple[str, str]:
        """(better, worse)."""
        return (self.better, self.worse)

    def to_dict(self) -> dict[str, Any]:
        """The preference as JSON-ready data, empty fields left out.

        Returns:
            {"better", "worse"} plus "reason" and "category" when set.
        """
        data: dict[str, Any] = {"better": self.better, "worse": self.worse}
        if self.reason:
            data["reason"] = self.reason
        if self.category is not None:
            data["category"] = self.category
        return data


class RankingPairs(Sequence[Preference]):
    """The strict pairs of a ranking as bare preferences (no reason, no category), made on demand.

    A ranking of n single ids defines n(n-1)/2 pairs: 5,000 ids from a 54 KB file are 12.5 million. Kept
    as the ranking they cost its size; iterating makes them one at a time, `len` and `in` are arithmetic.
    """

    __slots__ = ("_length", "_positions", "ranking")

    def __init__(self, ranking: Sequence[Sequence[str]]) -> None:
        self.ranking = [list(tier) for tier in ranking]
        self._length = count_strict_pairs(self.ranking)
        self._positions: dict[str, int] | None = None

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[Preference]:
        return (Preference(better, worse) for better, worse in iter_strict_pairs(self.ranking))

    def __getitem__(self, index):  # type: ignore[no-untyped-def, override]
        if isinstance(index, slice):
            picked = range(self._length)[index]
            if picked.step < 0:
                return tuple(self[i] for i in picked)
            return tuple(itertools.islice(self, picked.start, picked.stop, picked.step))
        if not -self._length <= index < self._length:
            raise IndexError("preference index out of range")
        return next(itertools.islice(self, index % self._length, None))

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, Preference) or item.reason or item.category is not None:
            return False
        return self.orders(item.better, item.worse)

    def orders(self, better: str, worse: str) -> bool:
        """Whether the ranking puts `better` in a tie group above `worse`'s.

        Args:
            better: an id.
            worse: an id.

        Returns:
            True for a strict pair of the ranking.
        """
        if self._positions is None:
            self._positions = positions(self.ranking)
        where = self._positions
        return better in where and worse in where and where[better] < where[worse]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RankingPairs):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        ids = sum(len(tier) for tier in self.ranking)
        return f"RankingPairs({self._length} pairs of a ranking of {ids} ids)"


@dataclass(frozen=True)
class Reference:
    """What is better than what in one group: a partial order, checked on construction.

    Raises InvalidReference on construction when a preference is malformed (an id preferred to itself, an
    unknown category), a pair is listed twice, two preferences contradict each other or several form a
    cycle, or a ranking is given whose strict pairs are not exactly the preferences.
    """

    group_id: str
    """The group the reference judges."""
    kind: Kind
    """Where it comes from: pairwise, ranking, degrade or consensus."""
    preferences: Sequence[Preference]
    """The pairs the reference defines; with a ranking, exactly its strict pairs (a `RankingPairs` when
    they are bare: made on demand, never all at once)."""
    ranking: list[list[str]] | None = None
    """A full ranking (tie groups, best first) when one defines the reference: Kendall's tau needs it."""
    details: dict[str, Any] = field(default_factory=dict, compare=False)
    """What else the source says (a consensus's k and threshold, say); scoring never reads it."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidReference(f"group {self.group_id!r}: unknown kind {self.kind!r}; known: {KINDS}")
        if not isinstance(self.preferences, RankingPairs):
            object.__setattr__(self, "preferences", tuple(self.preferences))
        if self.kind == "ranking" and self.ranking is None:
            raise InvalidReference(f"group {self.group_id!r}: a reference of kind ranking needs its ranking")
        if self.ranking is not None:
            try:
                check_ranking(self.ranking)
            except InvalidRanking as exc:
                raise InvalidReference(f"group {self.group_id!r}: {exc}") from exc
        if isinstance(self.preferences, RankingPairs):
            # A well-formed ranking's strict pairs are a partial order by construction: nothing to check
            # pair by pair, and nothing to expand.
            if self.preferences.ranking != self.ranking:
                raise InvalidReference(
                    f"group {self.group_id!r}: the preferences are another ranking's pairs"
                )
            return
        check_order(self.group_id, self.preferences)
        if self.ranking is not None:
            self._check_ranking_pairs(self.ranking)

    def _check_ranking_pairs(self, ranking: Ranking) -> None:
        """The given preferences are exactly the ranking's strict pairs: each is one, none twice (checked
        by `check_order`), and as many as the ranking has. Memory stays that of the preferences given."""
        strict = RankingPairs(ranking)
        stray = next((p.pair for p in self.preferences if not strict.orders(*p.pair)), None)
        if stray is None and len(self.preferences) != len(strict):
            given = {p.pair for p in self.preferences}
            stray = next(pair for pair in iter_strict_pairs(ranking) if pair not in given)
        if stray is not None:
            better, worse = stray
            raise InvalidReference(
                f"group {self.group_id!r}: the preferences are not the ranking's strict pairs "
                f"(first difference: {better} > {worse})"
            )

    def ids(self) -> set[str]:
        """Every trajectory id the reference mentions, in a preference or in its ranking.

        Returns:
            The ids.
        """
        found = {tid for tier in self.ranking or [] for tid in tier}
        if not isinstance(self.preferences, RankingPairs):  # a ranking's own pairs name only its ids
            found.update(tid for p in self.preferences for tid in p.pair)
        return found

    def defines(self, better: str, worse: str) -> bool:
        """Whether the reference holds the pair `better` > `worse` (without making a ranking's pairs).

        Args:
            better: an id.
            worse: an id.

        Returns:
            True when one of its preferences is that pair.
        """
        if isinstance(self.preferences, RankingPairs):
            return self.preferences.orders(better, worse)
        return any(p.pair == (better, worse) for p in self.preferences)

    def categories(self) -> dict[str, Sequence[Preference]]:
        """The preferences by category ("uncategorised" for those without one), in first-seen order.

        Returns:
            Category name -> its preferences.
        """
        if isinstance(self.preferences, RankingPairs):  # bare pairs: one category, kept unexpanded
            return {"uncategorised": self.preferences} if len(self.preferences) else {}
        grouped: dict[str, list[Preference]] = {}
        for p in self.preferences:
            grouped.setdefault(p.category or "uncategorised", []).append(p)
        return {name: tuple(members) for name, members in grouped.items()}

    def restricted(self, preferences: Iterable[Preference]) -> Reference:
        """A pairwise reference over some of this one's preferences (one category, say).

        Args:
            preferences: a subset of `self.preferences`.

        Returns:
            A `pairwise` reference of the same group; no ranking (a subset is not a full ranking).
        """
        return Reference(self.group_id, "pairwise", tuple(preferences), details=dict(self.details))

    def to_dict(self) -> dict[str, Any]:
        """The reference as JSON-ready data, as one value of a reference file's object (no group id).

        Returns:
            {"kind", "preferences"} plus "ranking" and "details" when set; `reference_from_dict` reads it.
        """
        data: dict[str, Any] = {"kind": self.kind}
        if self.ranking is not None:
            data["ranking"] = self.ranking
        data["preferences"] = [p.to_dict() for p in self.preferences]
        if self.details:
            data["details"] = self.details
        return data


def strict_pairs(ranking: Ranking) -> list[tuple[str, str]]:
    """(better, worse) for every pair a ranking orders strictly, tier by tier.

    Args:
        ranking: tie groups of ids, best first.

    Returns:
        The pairs; ids tied with each other form none. A list: n ids make up to n(n-1)/2 pairs, so code
        reading files iterates `iter_strict_pairs` instead.
    """
    return list(iter_strict_pairs(ranking))


def iter_strict_pairs(ranking: Ranking) -> Iterator[tuple[str, str]]:
    """(better, worse) for every pair a ranking orders strictly, one at a time (see `strict_pairs`).

    Args:
        ranking: tie groups of ids, best first.

    Returns:
        An iterator of the pairs, tier by tier.
    """
    for i, upper in enumerate(ranking):
        for lower in ranking[i + 1 :]:
            for better in upper:
                for worse in lower:
                    yield (better, worse)


def count_strict_pairs(ranking: Ranking) -> int:
    """How many pairs a ranking orders strictly, without making them.

    Args:
        ranking: tie groups of ids, best first.

    Returns:
        n(n-1)/2 less the pairs tied within each group.
    """
    sizes = [len(tier) for tier in ranking]
    total = sum(sizes)
    return (total * total - sum(size * size for size in sizes)) // 2


def check_order(group_id: str, preferences: Sequence[Preference]) -> None:
    """Check that preferences form a partial order and each is well formed.

    Args:
        group_id: named in the message.
        preferences: the preferences to check.

    Raises:
        InvalidReference: an id is preferred to itself, a category is unknown, a pair is listed twice, two
            preferences contradict each other (the pair is named both ways), or some form a cycle (the
            cycle is named, with the pair that closes it).
    """
    where = f"group {group_id!r}"
    seen: set[tuple[str, str]] = set()
    for p in preferences:
        if not isinstance(p.better, str) or not isinstance(p.worse, str) or not p.better or not p.worse:
            raise InvalidReference(f"{where}: a preference needs `better` and `worse` ids (strings)")
        if p.better == p.worse:
            raise InvalidReference(f"{where}: {p.better} is preferred to itself")
        if p.category is not None and p.category not in CATEGORIES:
            raise InvalidReference(
                f"{where}: pair {p.better} > {p.worse}: unknown category {p.category!r}; "
                f"known: {', '.join(CATEGORIES)}"
            )
        if p.pair in seen:
            raise InvalidReference(f"{where}: pair {p.better} > {p.worse} is listed twice")
        if (p.worse, p.better) in seen:
            raise InvalidReference(
                f"{where}: contradictory pair: {p.worse} > {p.better} and {p.better} > {p.worse}"
            )
        seen.add(p.pair)
    pairs = [p.pair for p in preferences]
    cycle = _find_cycle(pairs)
    if cycle:
        # Name the cycle from the pair listed last: the one whose addition closed it.
        edges = list(zip(cycle, cycle[1:], strict=False))
        last = max(range(len(edges)), key=lambda i: pairs.index(edges[i]))
        nodes = cycle[:-1]
        start = (last + 1) % len(nodes)
        cycle = [*nodes[start:], *nodes[:start], nodes[start]]
        closing = f"{cycle[-2]} > {cycle[-1]}"
        raise InvalidReference(
            f"{where}: cyclic preferences {' > '.join(cycle)} (the pair {closing} closes it)"
        )


def _find_cycle(pairs: Sequence[tuple[str, str]]) -> list[str]:
    """A cycle of the graph better -> worse as a closed walk [a, b, ..., a], or [] when there is none."""
    successors: dict[str, list[str]] = {}
    for better, worse in pairs:
        successors.setdefault(better, []).append(worse)
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in successors:
        if state.get(start):
            continue
        path = [start]
        state[start] = 1
        stack = [iter(successors.get(start, []))]
        while stack:
            step = next(stack[-1], None)
            if step is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(step) == 1:
                return [*path[path.index(step) :], step]
            elif not state.get(step):
                state[step] = 1
                path.append(step)
                stack.append(iter(successors.get(step, [])))
    return []


# -- making references ------------------------------------------------------------------------------------


def reference_from_ranking(
    group_id: str, ranking: Ranking, kind: Kind = "ranking", details: Mapping[str, Any] | None = None
) -> Reference:
    """The reference a full ranking defines: its strict pairs, the ranking kept for tau.

    Args:
        group_id: the group.
        ranking: tie groups of ids, best first; tied ids form no pair.
        kind: `ranking`, or `degrade` for `gagar degrade`'s reference.json.
        details: kept with the reference.

    Returns:
        The reference.

    Raises:
        InvalidReference: the ranking is malformed (an empty tie group, an id listed twice).
    """
    try:
        check_ranking(ranking)
    except InvalidRanking as exc:
        raise InvalidReference(f"group {group_id!r}: {exc}") from exc
    tiers = [list(tier) for tier in ranking]
    return Reference(group_id, kind, RankingPairs(tiers), ranking=tiers, details=dict(details or {}))


def reference_from_degrade(group: Group, equivalent: Iterable[str] = ()) -> Reference:
    """The reference `gagar degrade` output defines, known by construction, read from the group itself.

    The clean trajectory each variant was derived from (`metadata["derived_from"]`) is better than every
    variant, and a milder variant (`metadata["severity"]`) better than a more severe one; variants of one
    severity tie. Each pair carries the worse variant's note as its reason and its kind's category
    (`DEGRADE_CATEGORY`). Trajectories that are not part of the degradation are left out.

    Args:
        group: a group `gagar degrade` wrote (its variants carry degradation metadata).
        equivalent: other ids that tie with the clean one (its patch class, say); `gagar degrade`'s own
            reference.json lists them, the group alone cannot tell.

    Returns:
        A `degrade` reference with the ranking [clean (+ equivalent)], [severity 1], [severity 2], ...

    Raises:
        InvalidReference: the group has no degradation variants, or they derive from different trajectories.
    """
    variants = [t for t in group.trajectories if "degradation" in t.metadata]
    if not variants:
        raise InvalidReference(f"group {group.group_id!r}: no trajectory carries degradation metadata")
    sources = {str(t.metadata.get("derived_from", "")) for t in variants}
    if len(sources) != 1 or "" in sources:
        raise InvalidReference(
            f"group {group.group_id!r}: variants must derive from one clean trajectory, "
            f"found {sorted(sources)}"
        )
    (clean,) = sources
    top = [clean, *(tid for tid in dict.fromkeys(equivalent) if tid != clean)]
    severities = sorted({int(t.metadata.get("severity", 0)) for t in variants})
    tiers = [top] + [[t.id for t in variants if int(t.metadata.get("severity", 0)) == s] for s in severities]
    about = {t.id: t for t in variants}
    preferences = []
    for better, worse in strict_pairs(tiers):
        spoiled = about[worse].metadata
        kind = str(spoiled["degradation"])
        preferences.append(
            Preference(better, worse, str(spoiled.get("note", kind)), DEGRADE_CATEGORY.get(kind))
        )
    return Reference(group.group_id, "degrade", tuple(preferences), ranking=tiers)


def consensus_reference(
    group_id: str, rankings: Sequence[Ranking], threshold: float, k: int | None = None
) -> Reference:
    """The pairs K gradings agree on: a before b in at least `threshold` of them.

    The share is over all K gradings: a grading that ties the pair, did not rank one of its ids, or failed
    (pass `k` above the number of rankings) does not agree. Pairs kept both ways are impossible above 0.5;
    a cycle is possible below (K-1)/K for K ids
    (three gradings a>b>c, b>c>a, c>a>b agree 2/3 on a cycle) and is refused, never silently broken.

    Args:
        group_id: the group.
        rankings: the K rankings (tie groups, best first), each under a fresh label permutation.
        threshold: the least share of rankings that must agree, in (0.5, 1].
        k: how many gradings were asked for, when some failed and left no ranking; default len(rankings).

    Returns:
        A `consensus` reference (no ranking: a partial order), each pair's reason giving its share;
        details hold k and threshold.

    Raises:
        InvalidReference: no rankings, a threshold outside (0.5, 1], k below the number of rankings, a
            malformed ranking, or agreed pairs that form a cycle (named).
    """
    if not rankings:
        raise InvalidReference(f"group {group_id!r}: a consensus needs at least one ranking")
    if not 0.5 < threshold <= 1.0:
        raise InvalidReference(f"group {group_id!r}: threshold {threshold} is outside (0.5, 1]")
    orders: list[dict[str, int]] = []
    for i, ranking in enumerate(rankings):
        try:
            check_ranking(ranking)
        except InvalidRanking as exc:
            raise InvalidReference(f"group {group_id!r}: ranking {i}: {exc}") from exc
        orders.append({tid: index for index, tier in enumerate(ranking) for tid in tier})
    ids = list(dict.fromkeys(tid for ranking in rankings for tier in ranking for tid in tier))
    if k is None:
        k = len(rankings)
    elif k < len(rankings):
        raise InvalidReference(f"group {group_id!r}: k={k} is below the {len(rankings)} rankings given")
    preferences = []
    for a, b in itertools.combinations(ids, 2):
        ahead = sum(1 for o in orders if a in o and b in o and o[a] < o[b])
        behind = sum(1 for o in orders if a in o and b in o and o[b] < o[a])
        for better, worse, count in ((a, b, ahead), (b, a, behind)):
            if count / k >= threshold:
                preferences.append(Preference(better, worse, f"{count} of {k} gradings agree"))
    return Reference(group_id, "consensus", tuple(preferences), details={"k": k, "threshold": threshold})


# -- scoring ----------------------------------------------------------------------------------------------


def credit(ranking: Ranking, pairs: Iterable[tuple[str, str]]) -> tuple[float, int]:
    """(credit, scored pairs) of a ranking over (better, worse) pairs whose two ids it ranked.

    Args:
        ranking: the grader's tie groups, best first.
        pairs: (better, worse) pairs.

    Returns:
        1 per pair the ranking orders the same way, 0.5 per pair it ties (a coin flip between the two
        orders), 0 otherwise; and how many pairs were scored. Raw sums, so groups can be pooled.

    Raises:
        ValueError: the ranking lists an id twice.
    """
    rank = positions(ranking)
    total, scored = 0.0, 0
    for better, worse in pairs:
        if better not in rank or worse not in rank:
            continue
        scored += 1
        if rank[better] < rank[worse]:
            total += 1.0
        elif rank[better] == rank[worse]:
            total += 0.5
    return total, scored


def reference_credit(ranking: Ranking, reference: Reference) -> tuple[float, int]:
    """(credit, pairs): how far a grader's ranking agrees with a reference, over the reference's pairs.

    Args:
        ranking: the grader's tie groups, best first.
        reference: the reference; only its pairs whose two ids were ranked are scored.

    Returns:
        (credit, scored pairs): 1 per pair in the reference's order, 0.5 per tie; pairwise accuracy is
        their ratio.

    Raises:
        ValueError: the ranking lists an id twice.
    """
    return credit(ranking, (p.pair for p in reference.preferences))


__all__ = [
    "CATEGORIES",
    "DEGRADE_CATEGORY",
    "KINDS",
    "PREFERENCE_KEYS",
    "Category",
    "Kind",
    "Preference",
    "RankingPairs",
    "Reference",
    "check_order",
    "consensus_reference",
    "count_strict_pairs",
    "credit",
    "iter_strict_pairs",
    "reference_credit",
    "reference_from_degrade",
    "reference_from_ranking",
    "strict_pairs",
]
