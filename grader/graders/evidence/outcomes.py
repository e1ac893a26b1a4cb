"""What one probe did on one target, reduced to what compares across targets.

Two runs of the same behaviour must compare equal, so an outcome keeps its exit status, the exception it
ended on (type and last frame, without the line number: a patch above it moves it) and its output with what
varies from run to run taken out: memory addresses, timings, dates, temporary and tree paths, pytest's
session header. Per-test outcomes of a test run are read from pytest's `-rA` summary, unittest's `-v` lines
and sympy's `bin/test --verbose` lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MAX_OUTPUT_CHARS = 4000
"""Normalised output kept per outcome (the tail: the end of a run says how it ended)."""
EXCEPTION_MARK = "gagar-evidence-exception: "
"""The line the snippet driver writes when the snippet raises: `TYPE | PATH in FUNCTION`."""
PATHS_MARK = "gagar-evidence-paths: "
"""The line the probe command writes first to stderr: the tree's and the scratch folder's paths."""

_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{4,}\b")
_OBJECT_AT = re.compile(r" at 0x[0-9a-fA-F]+>")
_TIMING = re.compile(r"(?:\bin )?\b\d+(?:\.\d+)?\s*(?:seconds?|secs?|minutes?|ms|us|µs|s)\b")
_CLOCK = re.compile(
    r"\b\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?\b|\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b"
)
_TMP_PATH = re.compile(r"/tmp/[\w.-]+(?:/[\w.-]+)*")
_ENV_PATH = re.compile(r"/opt/gagar-env/lib/python[\d.]+/site-packages/")
_PYTHON_LIB = re.compile(r"/usr(?:/local)?/lib/python[\d.]+/")
_LINE_NUMBER = re.compile(r'(File "[^"]+", line )\d+|(\.py:)\d+\b')
_HEADER = re.compile(
    r"^(platform |rootdir: |cachedir: |plugins: |configfile: |inifile: |hypothesis profile |Using --randomly"
    r"|architecture: |cache: |ground types: |numpy: |random seed: |hash randomization: |executable: "
    r"|Python [\d.]+ |python [\d.]+|collecting \.\.\.|collected \d+ items?)"
)
_EXCEPTION_LINE = re.compile(
    r"^(?:E\s+)?(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning|Failure))(?::|$)"
)
_PYTEST_RESULT = re.compile(r"^(?P<outcome>PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(?P<test>\S+)")
_SYMPY_FILE = re.compile(r"^(?P<file>\S+\.py)\[\d+\]")
_SYMPY_RESULT = re.compile(r"^(?P<test>test_\w+)\s+(?P<outcome>ok|F|E|f|X|s|Slow|w)\b")
_UNITTEST_RESULT = re.compile(
    r"^(?P<test>\w+) \((?P<where>[\w.]+)\)(?: .*?)? \.\.\. "
    r"(?P<outcome>ok|FAIL|ERROR|skipped\b.*|expected failure|unexpected success)$"
)
_PASSED = {"PASSED", "XFAIL", "SKIPPED", "ok", "f", "s", "Slow", "w"}


@dataclass(frozen=True)
class Outcome:
    """One probe on one target."""

    status: str
    """"ok" (exit 0), "failed" (another exit status), "timeout" (stopped at its time limit: evidence, not an
    error) or "not-run" (the harness could not start it; compares with nothing)."""
    exit_code: int | None = None
    exception: str = ""
    """The type of the exception it ended on (or the last one a test run shows), else empty."""
    frame: str = ""
    """Where that exception was raised: "PATH in FUNCTION" (tree-relative), else empty."""
    output: str = ""
    """Normalised stdout and stderr (see `normalise`), the last `MAX_OUTPUT_CHARS`."""
    seconds: float = 0.0
    tests: dict[str, bool] = field(default_factory=dict)
    """For a test run: test id -> passed (skips and expected failures count as passed)."""

    @property
    def crashed(self) -> bool:
        """Ended on an exception, or was stopped at its time limit."""
        return self.status == "timeout" or (self.status == "failed" and bool(self.exception))

    def behaviour(self) -> tuple[str, str, str]:
        """What clustering compares: status, exception type and normalised output (the frame is left out:
        two fixes may raise the same error from different places, and line numbers move)."""
        return (self.status, self.exception, self.output)

    def short(self) -> str:
        """A few words for a table cell: "ok", "exit 1", "TypeError", "timeout", "not run"."""
        if self.status == "not-run":
            return "not run"
        if self.status == "timeout":
            return "timeout"
        if self.exception:
            return self.exception.rsplit(".", 1)[-1]
        return "ok" if self.status == "ok" else f"exit {self.exit_code}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "exception": self.exception,
            "frame": self.frame,
            "output": self.output,
            "seconds": round(self.seconds, 3),
            "tests": dict(self.tests),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        """The inverse of `to_dict` (the evidence cache stores outcomes so).

        Raises:
            KeyError, TypeError, ValueError: a record of another shape.
        """
        return cls(
            status=str(data["status"]),
            exit_code=None if data.get("exit_code") is None else int(data["exit_code"]),
            exception=str(data.get("exception", "")),
            frame=str(data.get("frame", "")),
            output=str(data.get("output", "")),
            seconds=float(data.get("seconds", 0.0)),
            tests={str(k): bool(v) for k, v in dict(data.get("tests", {})).items()},
        )


def normalise(text: str, tree: str = "", scratch: str = "") -> str:
    """Output with what varies between runs of the same behaviour taken out.

    Args:
        text: stdout and stderr.
        tree: the absolute path of the target's tree in the sandbox (becomes `<tree>`).
        scratch: the probe's scratch folder (becomes `<tmp>`).

    Returns:
        The text with: the two paths, other /tmp paths and the environment's site-packages replaced by
        placeholders; memory addresses by `0x?`; timings by `<t>`; clock times by `<clock>`; traceback and
        `file.py:N` line numbers by `N`; pytest's and sympy's session header lines and trailing spaces
        removed;
        the tail of `MAX_OUTPUT_CHARS` kept.
    """
    for path, placeholder in ((scratch, "<tmp>"), (tree, "<tree>")):
        if len(path) > 1:
            text = text.replace(path.rstrip("/") + "/", placeholder + "/").replace(
                path.rstrip("/"), placeholder
            )
    text = _ENV_PATH.sub("<env>/", text)
    text = _PYTHON_LIB.sub("<python>/", text)
    text = _TMP_PATH.sub("<tmp>", text)
    text = _OBJECT_AT.sub(" at 0x?>", text)
    text = _ADDRESS.sub("0x?", text)
    text = _CLOCK.sub("<clock>", text)
    text = _TIMING.sub("<t>", text)
    text = _LINE_NUMBER.sub(lambda m: (m.group(1) or m.group(2)) + "N", text)
    lines = [line.rstrip() for line in text.split("\n")]
    kept = [line for line in lines if not _HEADER.match(line) and not line.startswith(PATHS_MARK)]
    result = "\n".join(kept).strip("\n")
    return result[-MAX_OUTPUT_CHARS:]


def exception_of(stdout: str, stderr: str) -> tuple[str, str]:
    """The exception a run ended on: the driver's mark when present, else the last exception line.

    Args:
        stdout: the run's stdout.
        stderr: the run's stderr.

    Returns:
        (type, frame); frame is empty unless the driver marked it; ("", "") when none shows.
    """
    for line in reversed((stdout + "\n" + stderr).split("\n")):
        if line.startswith(EXCEPTION_MARK):
            kind, _, frame = line[len(EXCEPTION_MARK) :].partition(" | ")
            return kind.strip(), frame.strip()
    for line in reversed(stderr.split("\n") + stdout.split("\n")):
        match = _EXCEPTION_LINE.match(line.strip())
        if match:
            return match.group("type"), ""
    return "", ""


def test_results(output: str) -> dict[str, bool]:
    """Per-test outcomes of a test run: pytest's `-rA` summary lines, unittest's `-v` lines, sympy's
    `bin/test --verbose` lines.

    Args:
        output: the run's stdout and stderr.

    Returns:
        Test id -> passed (skips and expected failures count as passed); empty when no line is recognised.
    """
    results: dict[str, bool] = {}
    current_file = ""
    for raw in output.split("\n"):
        line = raw.strip()
        pytest = _PYTEST_RESULT.match(line)
        if pytest:
            results[pytest.group("test")] = pytest.group("outcome") in _PASSED
            continue
        sympy_file = _SYMPY_FILE.match(line)
        if sympy_file:
            current_file = sympy_file.group("file")
            continue
        unittest = _UNITTEST_RESULT.match(line)
        if unittest:
            outcome, test, where = unittest.group("outcome", "test", "where")
            where = where.removesuffix(f".{test}")  # Python 3.11 names the method inside the brackets too
            results[f"{where}::{test}"] = outcome == "ok" or outcome.startswith(("skipped", "expected"))
            continue
        sympy = _SYMPY_RESULT.match(line)
        if sympy:
            results[f"{current_file}::{sympy.group('test')}"] = sympy.group("outcome") in _PASSED
    return results


def paths_of(stderr: str) -> tuple[str, str]:
    """The tree and scratch paths the probe command wrote first (`PATHS_MARK tree=... tmp=...`).

    Args:
        stderr: the run's stderr.

    Returns:
        (tree, scratch); empty strings when the line is missing (the command did not start).
    """
    for line in stderr.split("\n"):
        if line.startswith(PATHS_MARK):
            fields = dict(part.split("=", 1) for part in line[len(PATHS_MARK) :].split() if "=" in part)
            return fields.get("tree", ""), fields.get("tmp", "")
    return "", ""
