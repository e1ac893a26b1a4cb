"""What the `run` tool shows the model: each target's exit, time and output within the output cap, what the
sandbox runs on, and, before any `run`, what the task's environment holds.

The cap is shared so that what matters survives: a target's output equal to an earlier target's is named as
such instead of shown again; short outputs (`SHORT_LINES`) are never cut, whatever the number of targets;
what is left goes to the longer ones, each keeping whole lines of its head and its tail (a test run's summary)
with the lines dropped named; and in a target's share stdout comes first, stderr's warnings taking at most a
quarter of it when both are long.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from grader.sandbox.base import ExecResult, Sandbox, SandboxError
from grader.sandbox.output import cap_lines, cap_text

DEFAULT_RUN_TIMEOUT = 60.0
DEFAULT_TESTS_TIMEOUT = 300.0
"""Seconds per target for `tests` when the model gives no timeout: a task's test file, not a probe (a
pytest-dev/pytest test file took 116 s on one target of 2 loaded cores)."""
MAX_RUN_TIMEOUT = 600.0  # as prompts/tools.json says; the sandbox's lifetime leaves room for one such run
SHORT_LINES = 40
SHORT_CHARS = 4_000
"""An output of at most this many lines and characters (stdout and stderr together) is never cut."""
STDERR_SHARE = 4
"""When both streams are long, stderr gets 1/STDERR_SHARE of a target's share: warnings there must not
crowd out stdout."""

# Which Python a target's `python3` and `python` are: one line each, "<name> <path> <version> <venv 0|1>"
# ("<name>" alone when there is none). Python 2 reads the code too: `python` may be one.
_INTERPRETER_PROBE = (
    'for name in python3 python; do path=$(command -v "$name") || { echo "$name"; continue; }; '
    'echo "$name $path $("$path" -c \'import sys; sys.stdout.write("%s %d" % (sys.version.split()[0], '
    'sys.prefix != getattr(sys, "base_prefix", sys.prefix)))\' 2>/dev/null)"; done'
)


def split_budget(stdout_chars: int, stderr_chars: int, total: int) -> tuple[int, int]:
    """How many characters of a target's `total` each stream may show: stdout first. A stream shorter than
    its share leaves the rest to the other; when both are long, stderr gets a quarter (its warnings do not
    crowd out stdout, where a test run's results are).

    Args:
        stdout_chars, stderr_chars: each stream's length.
        total: the characters the target may show.

    Returns:
        (stdout's share, stderr's share), each at least 1.
    """
    stderr_share = min(stderr_chars, max(total // STDERR_SHARE, total - stdout_chars))
    return max(1, total - stderr_share), max(1, stderr_share)


def is_short(result: ExecResult) -> bool:
    """Whether a target's output is short enough never to be cut (`SHORT_LINES`, `SHORT_CHARS`)."""
    text = result.stdout + result.stderr
    return len(text) <= SHORT_CHARS and text.count("\n") <= SHORT_LINES


def target_shares(lengths: Sequence[int], total: int, short: Sequence[bool]) -> list[int]:
    """Each output's share of the `total` cap: a short one (`short`) whole; the rest divided so that an
    output under an equal share keeps all of it and leaves what it does not need to the longer ones.

    Args:
        lengths: each output's characters.
        total: the cap over all of them.
        short: which outputs are never cut.

    Returns:
        Each output's share in characters, in order (at least 1000 for a long one).
    """
    shares = [length if is_whole else 0 for length, is_whole in zip(lengths, short, strict=True)]
    open_ = [i for i, is_whole in enumerate(short) if not is_whole]
    left = max(0, total - sum(shares))
    while open_:
        equal = left // len(open_)
        fitting = [i for i in open_ if lengths[i] <= equal]
        if not fitting:
            for i in open_:
                shares[i] = max(1000, equal)
            break
        for i in fitting:
            shares[i] = lengths[i]
            left -= lengths[i]
        open_ = [i for i in open_ if i not in fitting]
    return shares


def render_targets(
    results: Mapping[str, ExecResult], total: int, wrap: Callable[[str], str], cut_note: str = ""
) -> list[str]:
    """Each target's block of a `run` result: "== LABEL: exit N, S s" and its streams as data, or one line
    saying its exit and output are the same as an earlier target's.

    Args:
        results: each target's result by label, in the order shown.
        total: the characters the outputs may take together (`target_shares`).
        wrap: marks a block's text as data.
        cut_note: said after the status of a target that timed out (why its timeout was what it was).

    Returns:
        The blocks, in order.
    """
    first_of: dict[tuple[int, bool, str, str], str] = {}
    distinct = {}
    for label, r in results.items():
        first_of.setdefault((r.exit_code, r.timed_out, r.stdout, r.stderr), label)
        if first_of[(r.exit_code, r.timed_out, r.stdout, r.stderr)] == label:
            distinct[label] = r
    shares = dict(
        zip(
            distinct,
            target_shares(
                [len(r.stdout) + len(r.stderr) for r in distinct.values()],
                total,
                [is_short(r) for r in distinct.values()],
            ),
            strict=True,
        )
    )
    blocks = []
    for label, r in results.items():
        status = f"TIMED OUT{cut_note}" if r.timed_out else f"exit {r.exit_code}"
        header = f"== {label}: {status}, {r.seconds:.1f}s"
        same = first_of[(r.exit_code, r.timed_out, r.stdout, r.stderr)]
        if same != label:
            blocks.append(f"{header}: the same exit and output as {same}")
            continue
        if is_short(r):
            stdout, stderr = r.stdout, r.stderr
        else:
            out_chars, err_chars = split_budget(len(r.stdout), len(r.stderr), shares[label])
            stdout, stderr = cap_lines(r.stdout, out_chars), cap_lines(r.stderr, err_chars)
        if r.truncated:  # the sandbox kept the head and tail bytes of a stream: lines number what it kept
            header += " (over the sandbox's output cap: its middle was dropped)"
        blocks.append(f"{header}\n" + wrap(f"stdout:\n{stdout}\nstderr:\n{stderr}"))
    return blocks


def run_timeout(asked: float | None, tests: bool, seconds_left: float, targets: int, at_once: int) -> float:
    """The timeout each target of a `run` gets: what the model asked (or the default for a probe or for
    `tests`), at most `MAX_RUN_TIMEOUT`, and never so long that the run could outlast the sandbox-time budget
    left: the targets run `at_once` at a time.

    Args:
        asked: the model's timeout, or None.
        tests: whether the command is the task's tests.
        seconds_left: what the sandbox-time budget has left.
        targets: how many targets run.
        at_once: how many run at the same time (1 for a backend that runs one command at a time).

    Returns:
        Seconds per target (positive when `seconds_left` is).
    """
    default = DEFAULT_TESTS_TIMEOUT if tests else DEFAULT_RUN_TIMEOUT
    wanted = min(float(asked if asked is not None else default), MAX_RUN_TIMEOUT)
    waves = math.ceil(targets / max(1, min(at_once, targets)))
    return min(wanted, seconds_left / waves)


def describe_environment(task: Any, backend: str | None) -> str:
    """What `run`'s sandbox holds, as the opening message says it before any `run`: the interpreter the task
    asks for, its environment's pinned packages and install, its test command (which `tests` runs), or why
    there is none; from the task alone, so nothing is built to say it.

    Args:
        task: the group's task (`python`, `environment`, `image`, `test_command`, `setup`).
        backend: the sandbox backend, or None (no `run`).

    Returns:
        A paragraph, or "" when there is no `run`.
    """
    if backend is None:
        return ""
    recipe = task.environment or {}
    parts = []
    if task.image:
        parts.append(f"the task's own image {task.image}")
    elif backend == "docker" and (task.python or recipe):
        python = task.python or recipe.get("python")
        where = f"{recipe.get('repo')} {recipe.get('version')}".strip() if recipe.get("repo") else "the task"
        built = "built at the first run if it is not yet: not counted against any budget"
        parts.append(f"Python {python}, in the environment of {where} ({built})")
        pins = [str(p) for p in recipe.get("pip_packages") or []]
        if pins:
            shown = ", ".join(pins[:12]) + (f" and {len(pins) - 12} more" if len(pins) > 12 else "")
            parts.append(f"packages pinned: {shown}")
        if recipe.get("install"):
            parts.append(f"installed with `{cap_text(str(recipe['install']), 120)}`")
    elif backend == "docker":
        parts.append("the default Python image (no task environment)")
    else:
        parts.append(f"the {backend} backend: the host's own interpreters, no task environment built")
    if task.test_command:
        try:
            words = shlex.split(task.test_command)
        except ValueError:  # unbalanced quotes: the command is still shown as given
            words = task.test_command.split()
        words = [w for w in words if "=" not in w.split("/")[0]]  # past VAR=value prefixes
        parts.append(
            f"the test command, which `tests` runs: `{cap_text(task.test_command, 200)}` "
            f"(runner {words[0] if words else '?'})"
        )
    else:
        parts.append("no test command (`tests` is unavailable; give a shell command)")
    return "The sandbox of `run`: " + "; ".join(parts) + ".\n"


def describe_sandbox(sandbox: Sandbox, target: str) -> str:
    """What a sandbox runs commands with, in one line: its `python3` and `python` (version, path, whether a
    venv), its image or backend, and the setup each target runs first. Probes `target` once (its setup has
    run by then, so the probe costs one command).

    Args:
        sandbox: the open sandbox.
        target: a target that has already run a command.

    Returns:
        E.g. "python3 is Python 3.11.2 (/opt/gagar-env/bin/python3, a venv); python is ...; image
        gagar/env:x; each target ran `pip install -e .` first". A probe that fails is named, not raised.
    """
    try:
        probe = sandbox.exec(target, _INTERPRETER_PROBE, timeout=30)
        found = probe.stdout.splitlines() if probe.exit_code == 0 else []
        problem = "" if found else f"exit {probe.exit_code}: {cap_text(probe.stderr.strip(), 200)}"
    except SandboxError as exc:
        found, problem = [], str(exc)
    parts = []
    for line in found:
        fields = line.split()
        if len(fields) == 4:
            name, path, version, venv = fields
            parts.append(f"{name} is Python {version} ({path}{', a venv' if venv == '1' else ''})")
        elif fields:
            parts.append(
                f"{fields[0]} is not installed" if len(fields) == 1 else f"{fields[0]} is {fields[1]}"
            )
    if not parts:
        parts.append(f"the interpreter probe failed ({problem})")
    image = getattr(sandbox, "image", None)  # only image-based backends have one
    parts.append(f"image {image}" if image else f"{sandbox.backend} backend, no image")
    if sandbox.setup:
        parts.append(f"each target ran `{cap_text(sandbox.setup, 200)}` before its first command")
    return "; ".join(parts)


def same_failure(results: list[Any]) -> str:
    """One line when every target failed the same way before the probe could mean anything, else "".

    That is: the same non-zero exit and the same last error line, an import or syntax error or a missing
    command (the tree does not import, or the environment lacks the tool), on every target.

    Args:
        results: the `ExecResult` of each target.

    Returns:
        E.g. "exit 1, ModuleNotFoundError: No module named 'numpy'" or "".
    """
    if len(results) < 2:
        return ""
    lasts = set()
    for r in results:
        lines = [line.strip() for line in (r.stderr or r.stdout).splitlines() if line.strip()]
        if r.exit_code == 0 or r.timed_out or not lines:
            return ""
        lasts.add((r.exit_code, lines[-1]))
    if len(lasts) != 1:
        return ""
    code, last = lasts.pop()
    if not re.search(r"(ImportError|ModuleNotFoundError|SyntaxError)\b|command not found|not found$", last):
        return ""
    return f"exit {code}, {cap_text(last, 300)} (same on every target: the tree or environment, not a patch)"
