"""Looking back at a run: why the grader decided as it did.

`gagar show` prints a run or one group in the terminal, `gagar report` writes one self-contained HTML file,
and `gagar diff` says what distinguishes two candidates. All read a run directory of `gagar grade`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from grader.util.lazy import lazy_exports

if TYPE_CHECKING:
    from grader.inspect.diff import Comparison, compare
    from grader.inspect.report import build_report, write_report
    from grader.inspect.run import Run, Summary, load_run, summarize

# Loaded on first use (grader.util.lazy): importing the package loads none of these modules.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Comparison": "grader.inspect.diff",
        "compare": "grader.inspect.diff",
        "build_report": "grader.inspect.report",
        "write_report": "grader.inspect.report",
        "Run": "grader.inspect.run",
        "Summary": "grader.inspect.run",
        "load_run": "grader.inspect.run",
        "summarize": "grader.inspect.run",
    },
    globals(),
)

__all__ = ["Comparison", "Run", "Summary", "build_report", "compare", "load_run", "summarize", "write_report"]
