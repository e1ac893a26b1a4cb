"""How a teacher's ranking is scored against the reference: the one place `gagar distill` reads references.

Until issue 14's reference format (`grader.references`) is in, references are full rankings read by
`grader.evaluation.harness.load_reference`; the credit is the pairwise credit over the pairs the ranking
orders strictly (ties count half). Switching to `load_references` / `agreement` changes this module only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.evaluation import metrics
from grader.evaluation.harness import load_reference
from grader.ranking import Ranking


@dataclass(frozen=True)
class Reference:
    """What distillation needs of one group's reference."""

    group_id: str
    ranking: Ranking

    def ids(self) -> set[str]:
        """Every trajectory id the reference names."""
        return {tid for tier in self.ranking for tid in tier}


def load_references(path: Path | str) -> dict[str, Reference]:
    """Read a reference file.

    Args:
        path: a JSON object from group id to ranking (tie groups of ids, best first).

    Returns:
        Group id -> its reference.

    Raises:
        InputFileError: the file cannot be read or is not a JSON object.
        InvalidRanking: a ranking is malformed (the message names the file and the group).
    """
    return {gid: Reference(gid, ranking) for gid, ranking in load_reference(path).items()}


def agreement(ranking: Ranking, reference: Reference) -> tuple[float, int]:
    """(credit, pairs): 1 per reference pair the ranking orders the same way, 0.5 per pair it ties.

    Args:
        ranking: the teacher's ranking, in trajectory ids.
        reference: the group's reference.

    Returns:
        The credit and the number of reference pairs whose ids are both ranked.
    """
    return metrics.pairwise_credit(ranking, reference.ranking)
