"""Statement probes: the runnable snippets of a task's problem statement, each its own probe.

Most SWE-bench statements carry a block that shows the bug, but not every block is a program: shell sessions,
program output, tracebacks, configuration and excerpts of the library's own source sit beside the code that
reproduces the bug. Running each block as `python -c` changed nothing on six dev groups (issue 38), so a
block is kept only when it parses as Python once its prompts are taken off:

- fenced blocks (```` ``` ```` or `~~~`, any info string but a non-Python language's) and indented blocks
  (four spaces or a tab, after a blank line);
- doctest sessions (`>>> ` / `... `) and IPython sessions (`In [3]: ` / `   ...: `): the prompts are
  stripped and the lines that follow a prompt without one are kept as that session's *expected output*
  (`Out[3]:` included); such a probe runs as a REPL would, printing each expression statement's value;
- tracebacks, program output, shell prompts (`$ ...`) and configuration are left out: they do not parse;
- a block that only defines things (functions, classes, imports: an excerpt of source, or a test file) runs
  nothing and is left out, unless a later command in the statement runs it as a file: a block of tests
  followed by `pytest test_x.py` (or `pylint x.py`, `python x.py`, `sphinx-build ...` is not: it needs a
  project) becomes a probe that writes the file and runs that command.

Nothing here runs anything: `extract_probes` only reads text. The probes run in the task's sandbox
(`grader.graders.evidence.run`), never on the host.
"""

from __future__ import annotations

import ast
import hashlib
import re
import shlex
import warnings
from dataclasses import dataclass

MAX_PROBES = 6
"""At most this many statement probes per task: a statement with more blocks is mostly output and source."""
MAX_SOURCE_CHARS = 20_000
"""A block longer than this is a dump, not a reproduction, and is left out."""

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")
_DOCTEST = re.compile(r"^\s*(>>>|\.\.\.)( |$)")
_IPY_IN = re.compile(r"^\s*In \[\d*\]: ?")
_IPY_CONT = re.compile(r"^\s*\.\.\.+: ?")
_IPY_OUT = re.compile(r"^\s*Out\[\d*\]: ?")
_NOT_PYTHON = {
    "sh",
    "bash",
    "shell",
    "console",
    "shell-session",
    "text",
    "txt",
    "pytb",
    "traceback",
    "ini",
    "toml",
    "cfg",
    "yaml",
    "yml",
    "json",
    "rst",
    "restructuredtext",
    "diff",
    "patch",
    "html",
    "xml",
    "latex",
    "tex",
    "c",
    "cpp",
    "js",
    "javascript",
    "make",
    "dockerfile",
    "output",
}
_COMMAND = re.compile(
    r"^\s*(?:\$\s*|>\s*)?(?P<command>(?:python[\d.]*\s+-m\s+)?(?:pytest|py\.test|pylint|python[\d.]*)"
    r"(?:[ \t][^\n|;&`<>()]*)?)$",
    re.MULTILINE,
)
MAX_COMMANDS = 3
"""At most this many commands run one test file (`pytest -rs`, then `pytest -rs --runxfail`)."""
DEFAULT_TEST_FILE = "test_statement.py"
"""The name a test file gets when the command that runs it names none (`pytest -rs`)."""
_INLINE_CODE = re.compile(r"`([^`\n]+)`")
_SAFE_FILE = re.compile(r"^[A-Za-z_][\w-]{0,60}\.py$")
_ALLOWED_OPTION = re.compile(r"^(-{1,2}[A-Za-z][\w-]*(=[\w.,:/{}\"' -]*)?|[A-Za-z_][\w-]{0,60}\.py)$")


@dataclass(frozen=True)
class StatementProbe:
    """One runnable snippet of a statement."""

    name: str
    """Short and stable: "s1", "s2", ... in the statement's order."""
    kind: str
    """"repl" (doctest or IPython: expression values are printed), "script" (run as a file) or "file"
    (written as `filename` and run with `command`)."""
    source: str
    """The Python source, prompts stripped."""
    expected: str = ""
    """The output the statement shows after its prompts (doctest and IPython sessions), else empty."""
    filename: str = ""
    """For kind "file": the file name the command runs (validated: a plain `name.py`)."""
    command: tuple[str, ...] = ()
    """For kind "file": the command's argv, as the statement gives it (validated: the tool and options)."""
    line: int = 0
    """The statement line its block starts on (1-based), for the report."""

    @property
    def key(self) -> str:
        """A digest of what runs (kind, source, file name, command): the evidence cache keys on it."""
        text = "\0".join((self.kind, self.source, self.filename, *self.command))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]

    def describe(self) -> str:
        """One line naming the probe: its kind, where it starts and its first line of code."""
        first = next((line.strip() for line in self.source.splitlines() if line.strip()), "")
        shown = first if len(first) <= 60 else first[:57] + "..."
        if self.kind == "file":
            return f"{self.name} (line {self.line}): {self.filename} run by `{' '.join(self.command)}`"
        return f"{self.name} (line {self.line}, {self.kind}): {shown}"


@dataclass(frozen=True)
class _Block:
    text: str
    info: str
    line: int
    end: int


def blocks(statement: str) -> list[_Block]:
    """The fenced and indented blocks of a statement, in order.

    Args:
        statement: the problem statement (markdown, any line endings).

    Returns:
        Each block's text (the fence's indentation taken off), its info string ("" for indented blocks) and
        its first and last line numbers. An unclosed fence runs to the end of the statement.
    """
    lines = statement.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    found: list[_Block] = []
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match:
            fence, indent = match.group("fence"), len(match.group("indent"))
            body: list[str] = []
            j = i + 1
            while j < len(lines) and not (
                lines[j].strip().startswith(fence[0] * len(fence)) and lines[j].strip().strip(fence[0]) == ""
            ):
                body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
                j += 1
            found.append(_Block("\n".join(body), match.group("info").strip().lower(), i + 1, j + 1))
            i = j + 1
            continue
        if _indented(lines[i]) and (i == 0 or not lines[i - 1].strip()):
            j = i
            body = []
            while j < len(lines) and (_indented(lines[j]) or not lines[j].strip()):
                body.append(lines[j][4:] if lines[j].startswith("    ") else lines[j][1:])
                j += 1
            text = "\n".join(body).strip("\n")
            if text:
                found.append(_Block(text, "", i + 1, j))
            i = j
            continue
        i += 1
    return found


def _indented(line: str) -> bool:
    return (line.startswith("    ") or line.startswith("\t")) and bool(line.strip())


def session(text: str) -> tuple[str, str] | None:
    """A doctest or IPython session's source and expected output, or None when the text has no prompt.

    Args:
        text: a block's text.

    Returns:
        (source, expected): the prompted lines without their prompts, and every other non-blank line (the
        outputs, `Out[n]:` prompts stripped), each joined with newlines.
    """
    source: list[str] = []
    expected: list[str] = []
    prompted = False
    for line in text.split("\n"):
        if _DOCTEST.match(line):
            prompted = True
            source.append(re.sub(r"^\s*(>>>|\.\.\.) ?", "", line, count=1))
        elif _IPY_IN.match(line):
            prompted = True
            source.append(_IPY_IN.sub("", line, count=1))
        elif _IPY_CONT.match(line) and prompted:
            source.append(_IPY_CONT.sub("", line, count=1))
        elif line.strip():
            expected.append(_IPY_OUT.sub("", line, count=1).rstrip())
    if not prompted:
        return None
    return "\n".join(source), "\n".join(expected)


def parses(source: str) -> ast.Module | None:
    """The module `source` parses to, or None (syntax errors and warnings are not raised).

    Args:
        source: Python source.

    Returns:
        The parsed module, or None when it is not Python (or is empty).
    """
    if not source.strip() or len(source) > MAX_SOURCE_CHARS:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def _runs_something(module: ast.Module) -> bool:
    """Whether a module does anything but define: a call, an expression, an assert, a loop, a print."""
    definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    for node in module.body:
        if isinstance(node, definitions):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        if isinstance(node, ast.Assign) and not any(isinstance(n, ast.Call) for n in ast.walk(node.value)):
            continue  # a constant: nothing observable happens
        return True
    return False


def _is_test_file(module: ast.Module) -> bool:
    return any(
        isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name.lower().startswith("test")
        for node in module.body
    )


def commands_for(text: str, limit: int = MAX_COMMANDS) -> list[tuple[str, tuple[str, ...]]]:
    """The commands in text that run a Python file: (file name, argv) each, validated, distinct, in order.

    A command is a line (or a `$ ` prompt) starting with pytest, py.test, pylint or python (`python -m
    pytest` too). Its file is the one `.py` argument it names; a pytest command that names none runs
    `DEFAULT_TEST_FILE`, appended. Every other argument must look like an option (`-rs`,
    `--msg-template=...`): a command with anything else (a pipe, a path, a glob) is left out rather than put
    on a command line. `python` runs the file (`python x.py`); `python -c` and bare `python` are left out.

    Args:
        text: statement text (what follows a block).
        limit: at most this many commands.

    Returns:
        The commands, each with the file name it runs and its argv (the tool first: pytest, pylint or python).
    """
    found: list[tuple[str, tuple[str, ...]]] = []
    text = _INLINE_CODE.sub(lambda m: "\n" + m.group(1) + "\n", text)  # `pytest -rs` in a sentence
    for match in _COMMAND.finditer(text):
        try:
            argv = shlex.split(match.group("command"))
        except ValueError:
            continue
        if len(argv) >= 3 and argv[0].startswith("python") and argv[1] == "-m":
            argv = argv[2:]
        tool = {"py.test": "pytest"}.get(argv[0], argv[0])
        if tool.startswith("python"):
            tool = "python"
        argv = [tool, *argv[1:]]
        files = [a for a in argv[1:] if a.endswith(".py")]
        if len(files) > 1 or not all(_ALLOWED_OPTION.match(a) for a in argv[1:]):
            continue  # anything we cannot vouch for is left out rather than passed to a command line
        if files:
            filename = files[0]
        elif tool == "pytest":
            filename = DEFAULT_TEST_FILE
            argv.append(filename)
        else:
            continue
        if not _SAFE_FILE.match(filename) or (tool == "python" and argv[1] != filename):
            continue
        if (filename, tuple(argv)) not in found:
            found.append((filename, tuple(argv)))
        if len(found) == limit:
            break
    return found


def extract_probes(statement: str, limit: int = MAX_PROBES) -> list[StatementProbe]:
    """The statement's runnable snippets, each its own probe, in the statement's order.

    Args:
        statement: the task's problem statement.
        limit: at most this many probes (the first ones).

    Returns:
        The probes (see the module docstring for what is kept); identical sources are kept once.
    """
    text = statement.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    probes: list[StatementProbe] = []
    seen: set[str] = set()
    for block in blocks(text):
        if block.info and block.info.split()[0] in _NOT_PYTHON:
            continue
        for probe in _probes_of(block, "\n".join(lines[block.end :])):
            if probe.key not in seen:
                seen.add(probe.key)
                probes.append(probe)
    return [
        StatementProbe(f"s{i + 1}", p.kind, p.source, p.expected, p.filename, p.command, p.line)
        for i, p in enumerate(probes[:limit])
    ]


def _probes_of(block: _Block, after: str) -> list[StatementProbe]:
    prompted = session(block.text)
    if prompted is not None:
        source, expected = prompted
        module = parses(source)
        if module is None or not _runs_something(module):
            return []
        return [StatementProbe("", "repl", source, expected, line=block.line)]
    module = parses(block.text)
    if module is None:
        return []
    if _is_test_file(module) or not _runs_something(module):
        return [
            StatementProbe("", "file", block.text, filename=filename, command=argv, line=block.line)
            for filename, argv in commands_for(after)
            if argv[0] == "pytest" or not _is_test_file(module) or filename != DEFAULT_TEST_FILE
        ]
    return [StatementProbe("", "script", block.text, line=block.line)]
