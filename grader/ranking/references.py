"""References: what "better" means for a group, one format for every source of it.

A reference is a set of preferences, each `better` over `worse` (trajectory ids) with an optional reason and
category, that form a partial order: no pair both ways, no cycle. Four kinds make one: `pairwise` (pairs
written down one by one), `ranking` (a full ranking's strict pairs), `degrade` (`gagar degrade` output,
known by construction) and `consensus` (the pairs K gradings under fresh labels agree on). A grader is
scored over the pairs the reference defines whose two ids it ranked: 1 per pair in the reference's order,
0.5 per pair it ties (`reference_credit`).

This module holds the names of both halves: the reference and its credit (`grader.ranking.reference_model`:
pure functions, no grading, no workspace) and its files (`grader.ranking.reference_files`: `load_references`,
`check_ids`, `write_references`).
"""

from __future__ import annotations

from grader.errors import InvalidReference
from grader.ranking.reference_files import (
    check_ids,
    load_references,
    preference_from_dict,
    reference_from_dict,
    write_references,
)
from grader.ranking.reference_model import (
    CATEGORIES,
    DEGRADE_CATEGORY,
    KINDS,
    PREFERENCE_KEYS,
    Category,
    Kind,
    Preference,
    RankingPairs,
    Reference,
    check_order,
    consensus_reference,
    count_strict_pairs,
    credit,
    iter_strict_pairs,
    reference_credit,
    reference_from_degrade,
    reference_from_ranking,
    strict_pairs,
)
from grader.util.lazy import renamed_names

__all__ = [
    "CATEGORIES",
    "DEGRADE_CATEGORY",
    "KINDS",
    "Category",
    "InvalidReference",
    "PREFERENCE_KEYS",
    "Kind",
    "Preference",
    "Reference",
    "RankingPairs",
    "check_ids",
    "check_order",
    "count_strict_pairs",
    "consensus_reference",
    "credit",
    "load_references",
    "preference_from_dict",
    "reference_from_degrade",
    "reference_from_dict",
    "reference_credit",
    "reference_from_ranking",
    "iter_strict_pairs",
    "strict_pairs",
    "write_references",
]

# Old names, for one release.
__getattr__ = renamed_names(__name__, {"agreement": "reference_credit"}, globals())
