"""Evaluating graders: metrics against reference rankings, degraded variants as labelled data, permutation
consistency, and a consensus grader that trusts itself only as far as its gradings agree."""

from grader.evaluation.benchmark import Benchmark, BenchmarkError, find_benchmark, load_benchmark
from grader.evaluation.consensus import ConsensusGrader, agreement_factor
from grader.evaluation.degrade import (
    KINDS,
    SEVERITY,
    Degradation,
    DegradeError,
    degrade_file,
    degrade_group,
    write_degradations,
)
from grader.evaluation.harness import (
    Evaluation,
    GroupConsistency,
    GroupScore,
    consistency,
    consistency_summary,
    evaluate,
    load_reference,
)
from grader.redistribute import shrink_weights

__all__ = [
    "KINDS",
    "Benchmark",
    "BenchmarkError",
    "SEVERITY",
    "ConsensusGrader",
    "Degradation",
    "DegradeError",
    "Evaluation",
    "GroupConsistency",
    "GroupScore",
    "agreement_factor",
    "consistency",
    "consistency_summary",
    "degrade_file",
    "degrade_group",
    "evaluate",
    "find_benchmark",
    "load_benchmark",
    "load_reference",
    "shrink_weights",
    "write_degradations",
]
