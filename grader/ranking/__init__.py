"""Ranking math, in one home: a ranking's tiers and their validation (`order`), agreement between
rankings (`agreement`: Kendall's tau-b, mean tau, position bias), references and the credit a ranking earns
against them (`references`: the type and credit in `reference_model`, the files in `reference_files`), and
the length monitor (`length`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.util.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "InvalidRanking": "grader.errors",
    "Ranking": "grader.ranking.order",
    "check_ranking": "grader.ranking.order",
    "validate_ranking": "grader.ranking.order",
    "positions": "grader.ranking.order",
    "expand_classes": "grader.ranking.order",
}

if TYPE_CHECKING:
    from grader.errors import InvalidRanking
    from grader.ranking.order import Ranking, check_ranking, expand_classes, positions, validate_ranking

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = ["InvalidRanking", "Ranking", "check_ranking", "expand_classes", "positions", "validate_ranking"]
