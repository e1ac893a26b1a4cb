"""The evidence stage: run the candidates before ranking them (issue 38).

`snippets` reads the statement's runnable snippets, `run` runs them and the relevant existing tests on base
and every distinct candidate in the task's sandbox (bounded, parallel, cached), `outcomes` reduces each run to
what compares across targets, and `signals` clusters the candidates and derives the heuristic's execution
signals and the table the LLM grader is shown.
"""

from grader.graders.evidence.run import DEFAULT_BUDGET, Evidence, OutcomeCache, gather
from grader.graders.evidence.signals import SIGNALS, candidate_signals, clusters, render_table
from grader.graders.evidence.snippets import StatementProbe, extract_probes

__all__ = [
    "DEFAULT_BUDGET",
    "SIGNALS",
    "Evidence",
    "OutcomeCache",
    "StatementProbe",
    "candidate_signals",
    "clusters",
    "extract_probes",
    "gather",
    "render_table",
]
