"""Looking back at a run: why the grader decided as it did.

`gagar show` prints a run or one group in the terminal, `gagar report` writes one self-contained HTML file,
and `gagar diff` says what distinguishes two candidates. All read a run directory of `gagar grade`.
"""

from grader.inspect.diff import Comparison, compare
from grader.inspect.report import build_report, write_report
from grader.inspect.run import Run, Summary, load_run, summarize

__all__ = ["Comparison", "Run", "Summary", "build_report", "compare", "load_run", "summarize", "write_report"]
