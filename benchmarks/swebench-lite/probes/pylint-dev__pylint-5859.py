"""The default notes still flag the common "# TODO: text" form (a tag followed by a colon)."""

import os
import tempfile

from pylint.lint import Run
from pylint.reporters.text import TextReporter

with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "notes_probe.py")
    with open(path, "w") as f:
        f.write('"""Probe module."""\n# TODO: finish this\nVALUE = 1\n')
    out = os.path.join(folder, "report.txt")
    with open(out, "w") as stream:
        Run(
            [path, "--disable=all", "--enable=fixme", "--persistent=n"],
            reporter=TextReporter(stream),
            exit=False,
        )
    with open(out) as f:
        report = f.read()
print(report)
assert "W0511" in report and "TODO: finish this" in report, "no fixme warning for '# TODO: finish this'"
