"""Evaluating graders: metrics against reference rankings, degraded variants as labelled data, permutation
consistency, and a consensus grader that trusts itself only as far as its gradings agree."""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.util.lazy import lazy_exports

if TYPE_CHECKING:
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
    from grader.redistribution.redistribute import shrink_weights

# Loaded on first use (grader.util.lazy): importing the package loads none of these modules.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Benchmark": "grader.evaluation.benchmark",
        "BenchmarkError": "grader.evaluation.benchmark",
        "find_benchmark": "grader.evaluation.benchmark",
        "load_benchmark": "grader.evaluation.benchmark",
        "ConsensusGrader": "grader.evaluation.consensus",
        "agreement_factor": "grader.evaluation.consensus",
        "KINDS": "grader.evaluation.degrade",
        "SEVERITY": "grader.evaluation.degrade",
        "Degradation": "grader.evaluation.degrade",
        "DegradeError": "grader.evaluation.degrade",
        "degrade_file": "grader.evaluation.degrade",
        "degrade_group": "grader.evaluation.degrade",
        "write_degradations": "grader.evaluation.degrade",
        "Evaluation": "grader.evaluation.harness",
        "GroupConsistency": "grader.evaluation.harness",
        "GroupScore": "grader.evaluation.harness",
        "consistency": "grader.evaluation.harness",
        "consistency_summary": "grader.evaluation.harness",
        "evaluate": "grader.evaluation.harness",
        "load_reference": "grader.evaluation.harness",
        "shrink_weights": "grader.redistribution.redistribute",
    },
    globals(),
)

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
