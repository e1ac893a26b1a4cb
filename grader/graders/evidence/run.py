"""Running the evidence stage: every probe on base and on every distinct candidate, in the task's sandbox.

Probes are the statement's runnable snippets (`snippets.extract_probes`) and one test run: the existing test
files the task's test command names, those any candidate touched, and the `test_<module>.py` files of the
modules they touched (regressions: passed on base, fail on a candidate). Each probe runs on base first (a
probe that does not start on base, or a test run that does not finish on base in time, is dropped: it is not
cheap, or not runnable here), then on the candidates in parallel.

Bounds: the stage has its own wall-time `budget` per group; a probe whose time is cut short by the budget is
recorded as not run, one that runs out of its own time limit as a timeout, which is evidence (a fix that
hangs), not an error. Outcomes are cached per (environment, tree, probe) under the gagar data cache
(`evidence/`), so a group graded again, or the same patch in another group, runs nothing. Statement text and
candidate code run only in the sandbox: the snippet travels in the command's environment and is executed by
the sandbox's interpreter; nothing here evaluates it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from grader.errors import GagarError
from grader.graders.evidence.outcomes import (
    EXCEPTION_MARK,
    PATHS_MARK,
    Outcome,
    exception_of,
    normalise,
    paths_of,
    test_results,
)
from grader.graders.evidence.snippets import StatementProbe, extract_probes
from grader.util.atomic import write_text_atomic
from grader.util.cachedirs import data_cache
from grader.workspace import patches
from grader.workspace.view import BASE, GradingView

DEFAULT_BUDGET = 300.0
"""Seconds the stage may take per group (wall time, sandbox start included)."""
SNIPPET_TIMEOUT = 60.0
"""Seconds one statement probe may run on one target."""
TEST_TIMEOUT = 30.0
"""Seconds the test run may take on base; a candidate gets three times base's time, within this bound."""
MAX_TEST_FILES = 6
PARALLEL = 3
"""Targets run at once: three keep two cores busy while a third copies its tree or starts."""
CACHE_VERSION = "1"
"""Part of every cache key: bump when a probe's command or an outcome's reading changes."""

_ALIASES = {
    "np": "numpy",
    "pd": "pandas",
    "plt": "matplotlib.pyplot",
    "mpl": "matplotlib",
    "sns": "seaborn",
    "so": "seaborn.objects",
    "xr": "xarray",
    "u": "astropy.units",
    "fits": "astropy.io.fits",
}
"""The conventional aliases a statement uses without importing them (`so.Plot(...)`): a snippet whose free
name is one of these gets that module, and any other free name is looked up in the repository's package
(`solve(...)` in a sympy statement), as the reader of the statement would assume."""
_SAFE_TEST_PATH = re.compile(r"^[\w][\w./-]*\.py$")
_DRIVER = r"""
import ast, os, sys, traceback
source = os.environ["GAGAR_SNIPPET"]
repl = os.environ.get("GAGAR_SNIPPET_MODE") == "repl"
tree = os.environ.get("GAGAR_TREE", "")
package = os.environ.get("GAGAR_PACKAGE", "")
ALIASES = ALIAS_TABLE
sys.argv = ["snippet"]
namespace = {"__name__": "__main__"}
def mark(exc):
    frames = traceback.extract_tb(exc.__traceback__)
    where = ""
    for frame in reversed(frames):
        name = frame[0]
        if name.startswith(tree + "/"):
            where = "%s in %s" % (name[len(tree) + 1:], frame[2])
            break
    sys.stdout.flush()
    traceback.print_exception(type(exc), exc, exc.__traceback__)
    sys.stderr.flush()
    print("MARK%s | %s" % (type(exc).__name__, where))
    sys.stdout.flush()
failed = False
module = ast.parse(source)
bound = set(dir(__builtins__)) | {"__name__"}
used = set()
for node in ast.walk(module):
    if isinstance(node, ast.Name):
        (used if isinstance(node.ctx, ast.Load) else bound).add(node.id)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        bound.add(node.name)
for name in sorted(used - bound):
    alias = ALIASES.get(name)
    try:
        if alias:
            namespace[name] = __import__(alias, fromlist=["_"])
        elif package:
            namespace[name] = getattr(__import__(package, fromlist=[name]), name)
    except Exception:
        pass
nodes = module.body if repl else [module]
for node in nodes:
    try:
        if repl:
            code = compile(ast.fix_missing_locations(ast.Interactive(body=[node])), "<statement>", "single")
            exec(code, namespace)
        elif module.body and isinstance(module.body[-1], ast.Expr):
            # A script ending on an expression is a notebook cell: its value is displayed (rendered).
            body = ast.Module(body=module.body[:-1], type_ignores=[])
            exec(compile(body, "<statement>", "exec"), namespace)
            last = ast.Expression(body=module.body[-1].value)
            value = eval(compile(ast.fix_missing_locations(last), "<statement>", "eval"), namespace)
            render = getattr(type(value), "_repr_png_", None)
            if render is not None:
                render(value)
            if value is not None:
                print(repr(value))
        else:
            exec(compile(node, "<statement>", "exec"), namespace)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            failed = True
    except BaseException as exc:
        failed = True
        mark(exc)
        if not repl:
            break
sys.stdout.flush()
sys.exit(1 if failed else 0)
""".replace("MARK", EXCEPTION_MARK).replace("ALIAS_TABLE", repr(_ALIASES))


@dataclass(frozen=True)
class Probe:
    """One thing the stage runs on every target."""

    name: str
    kind: str
    """"repl", "script", "file" (statement probes) or "tests" (the test run)."""
    command: str
    env: tuple[tuple[str, str], ...]
    timeout: float
    description: str
    expected: str = ""
    statement: StatementProbe | None = None

    @property
    def key(self) -> str:
        """What the cache keys an outcome on: what runs, not the harness around it (the prelude)."""
        text = json.dumps([CACHE_VERSION, self.kind, self.command.replace(_prelude(), ""), list(self.env)])
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


@dataclass
class Evidence:
    """What the stage found for one group."""

    group_id: str
    probes: list[Probe] = field(default_factory=list)
    outcomes: dict[str, dict[str, Outcome]] = field(default_factory=dict)
    """Probe name -> target -> outcome (base included); a probe dropped on base is not here."""
    candidates: list[str] = field(default_factory=list)
    """The targets besides base: one representative per class of equivalent patches."""
    skipped: str = ""
    """Why the stage did not run at all (no environment, no sandbox, nothing to probe), else empty."""
    notes: list[str] = field(default_factory=list)
    """What was dropped and why (a probe that did not start on base, the budget), one line each."""
    seconds: float = 0.0
    cached: int = 0
    ran: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A summary for the grade's details: probes, per-target outcome words, notes, timings."""
        return {
            "skipped": self.skipped,
            "probes": [{"name": p.name, "kind": p.kind, "what": p.description} for p in self.probes],
            "outcomes": {
                name: {target: outcome.short() for target, outcome in by_target.items()}
                for name, by_target in self.outcomes.items()
            },
            "notes": list(self.notes),
            "seconds": round(self.seconds, 2),
            "runs": self.ran,
            "cached": self.cached,
        }


def _prelude() -> str:
    """Shell that records the tree's and a private scratch folder's paths (first line of stderr)."""
    return (
        'tree=$PWD && tmp=$(mktemp -d) && echo "' + PATHS_MARK + 'tree=$tree tmp=$tmp" >&2 && '
        'export PYTHONPATH="$tree/src:$tree${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg '
        "GAGAR_TREE=$tree PYTHONDONTWRITEBYTECODE=1 && "
        # A host whose interpreter is only python3 (the local backend's Debian) runs the same commands.
        '{ command -v python >/dev/null 2>&1 || python() { python3 "$@"; }; } && '
    )


def statement_probe(probe: StatementProbe, package: str = "") -> Probe:
    """The command that runs a statement probe in a scratch folder, importing the target's tree.

    Args:
        probe: a statement probe; its source travels in `GAGAR_SNIPPET`, never on the command line.
        package: the repository's top-level package, where a snippet's free names are looked up ("" for
            none; validated as an identifier).

    Returns:
        The probe to run.
    """
    env = [("GAGAR_SNIPPET", probe.source)]
    if package.isidentifier():
        env.append(("GAGAR_PACKAGE", package))
    if probe.kind == "file":
        tool = {"pytest": "python -m pytest", "pylint": "python -m pylint", "python": "python"}[
            probe.command[0]
        ]
        args = " ".join(shlex.quote(a) for a in probe.command[1:])
        command = (
            _prelude() + f'cd "$tmp" && printf "%s" "$GAGAR_SNIPPET" > {shlex.quote(probe.filename)} && '
            f"{tool} {args}"
        )
    else:
        env.append(("GAGAR_SNIPPET_MODE", probe.kind))
        env.append(("GAGAR_DRIVER", _DRIVER))
        command = _prelude() + 'cd "$tmp" && python -c "$GAGAR_DRIVER"'
    return Probe(
        probe.name, probe.kind, command, tuple(env), SNIPPET_TIMEOUT, probe.describe(), probe.expected, probe
    )


def test_files(view: GradingView, candidates: Sequence[str]) -> list[str]:
    """The existing test files to run: the task's test command's, those candidates touched, and the
    `test_<module>.py` files (in the base tree) of the modules they touched.

    Args:
        view: the group.
        candidates: the candidate targets.

    Returns:
        At most `MAX_TEST_FILES` tree-relative paths that exist in base, in that order of preference.
    """
    try:
        named = [t for t in shlex.split(view.task.test_command or "") if t.endswith(".py")]
    except ValueError:
        named = []
    touched: list[str] = []
    for tid in candidates:
        for patched in patches.parse(view.diff(tid)):
            path = patches.file_path(patched)
            if path not in touched:
                touched.append(path)
    tests = [p for p in touched if patches.is_test_path(p) and p.endswith(".py")]
    stems = {PurePosixPath(p).stem for p in touched if p.endswith(".py") and not patches.is_test_path(p)}
    wanted = {f"test_{stem}.py" for stem in stems if stem != "__init__"}
    by_name = []
    if wanted:
        by_name = sorted(
            p
            for p in view.list_files(BASE)
            if PurePosixPath(p).name in wanted and patches.is_test_path(p) and "/" in p
        )
    chosen: list[str] = []
    for path in [*named, *tests, *by_name]:
        if path not in chosen and _SAFE_TEST_PATH.match(path) and view.exists(BASE, path):
            chosen.append(path)
    return chosen[:MAX_TEST_FILES]


def test_probe(view: GradingView, candidates: Sequence[str]) -> Probe | None:
    """The test run: the task's test command's runner on `test_files`, or None when there is no runner (the
    task names no test command) or no file.

    Args:
        view: the group.
        candidates: the candidate targets.

    Returns:
        The probe, run in the tree itself (the task's command expects it).
    """
    command = view.task.test_command or ""
    try:
        tokens = shlex.split(command)
    except ValueError:
        return None  # unbalanced quotes: not a command we can extend
    named = [t for t in tokens if t.endswith(".py")]
    # The runner is the command as the task wrote it, up to its first test file (an assignment such as
    # PYTHONWARNINGS='...' keeps its quoting, which re-quoting each token would break).
    cut = command.find(named[0]) if named else len(command)
    runner = command[:cut].strip() if cut > 0 else ""
    if not runner or runner.startswith("-"):
        return None
    files = test_files(view, candidates)
    if not files:
        return None
    line = _prelude() + f"{runner} {' '.join(shlex.quote(f) for f in files)}"
    return Probe("tests", "tests", line, (), TEST_TIMEOUT, f"tests: {', '.join(files)}")


def unbuilt_layer(view: GradingView, backend: str) -> str:
    """Why the stage should not start here: the task's environment layer is not built yet, else "".

    A layer build takes minutes (tens of them on a loaded machine) and would blow the stage's budget, so the
    stage runs only in a layer that is already there: `gagar env build GROUPS` (or an earlier grading's
    `run`) builds it. A task with its own image, or a backend that builds no layer, needs nothing.

    Args:
        view: the group.
        backend: the sandbox backend.

    Returns:
        The reason to skip, naming the layer and the command that builds it; "" when the stage can start.
    """
    task = view.task
    if backend != "docker" or task.image or not (task.python or task.environment):
        return ""
    from grader.sandbox.environments import environment_tag, spec_for_task
    from grader.sandbox.interpreters import choose_interpreter

    try:
        spec = spec_for_task(task.repo, task.python, task.environment)
        tag = environment_tag(spec, choose_interpreter(spec.python))
        import docker

        docker.from_env().images.get(tag)
    except GagarError as exc:
        return f"no environment layer for this task: {exc}"
    except Exception as exc:  # noqa: BLE001 - not found, or no engine: either way the stage cannot start
        if type(exc).__name__ == "ImageNotFound":
            return f"its environment layer {tag} is not built yet (gagar env build GROUPS builds it)"
        return f"no Docker engine to run it in: {exc}"
    return ""


def environment_key(view: GradingView) -> str:
    """What identifies the environment a probe runs in: the task's image, interpreter, recipe and setup."""
    task = view.task
    text = json.dumps([task.image, task.python, task.environment, task.setup], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def tree_key(view: GradingView, target: str) -> str:
    """What identifies a target's tree: the base commit, and the patch for a candidate."""
    patch = "" if target == BASE else view.patch(target)
    text = f"{view.task.repo}\0{view.task.base_commit}\0{patch}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


class OutcomeCache:
    """Outcomes on disk, one JSON file per (environment, tree, probe); unreadable entries are misses."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or data_cache() / "evidence"

    def _path(self, environment: str, tree: str, probe: str) -> Path:
        digest = hashlib.sha256(f"{environment}/{tree}/{probe}".encode()).hexdigest()
        return self.root / digest[:2] / f"{digest}.json"

    def get(self, environment: str, tree: str, probe: str) -> Outcome | None:
        try:
            return Outcome.from_dict(json.loads(self._path(environment, tree, probe).read_text("utf-8")))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, environment: str, tree: str, probe: str, outcome: Outcome) -> None:
        path = self._path(environment, tree, probe)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(path, json.dumps(outcome.to_dict()))
        except OSError:
            pass  # a cache that cannot be written costs a rerun next time, nothing else


def outcome_of(result: Any, timeout_cut: bool) -> Outcome:
    """An `ExecResult` read as an outcome (see `outcomes.Outcome`).

    Args:
        result: what the sandbox returned.
        timeout_cut: the run's time limit was cut short by the stage's budget (a timeout then proves
            nothing and is recorded as not run).

    Returns:
        The outcome.
    """
    tree, scratch = paths_of(result.stderr)
    if not tree:
        return Outcome(
            "not-run", result.exit_code, output=normalise(result.stderr)[-500:], seconds=result.seconds
        )
    if result.timed_out:
        return Outcome("not-run" if timeout_cut else "timeout", result.exit_code, seconds=result.seconds)
    kind, frame = exception_of(result.stdout, result.stderr)
    combined = result.stdout + ("\n" if result.stdout and result.stderr else "") + result.stderr
    output = normalise(combined, tree, scratch)
    return Outcome(
        "ok" if result.exit_code == 0 else "failed",
        result.exit_code,
        kind,
        frame,
        output,
        result.seconds,
        test_results(combined),
    )


def plan(view: GradingView, candidates: Sequence[str]) -> list[Probe]:
    """Every probe of a group: its statement probes, then the test run.

    Args:
        view: the group.
        candidates: the candidate targets.

    Returns:
        The probes, names unique.
    """
    name = view.task.repo.rstrip("/").removesuffix(".git").rsplit("/", 1)[-1].lower()
    package = name if name.isidentifier() and view.exists(BASE, f"{name}/__init__.py") else ""
    probes = [statement_probe(p, package) for p in extract_probes(view.task.statement)]
    tests = test_probe(view, candidates)
    return probes + ([tests] if tests else [])


def gather(
    view: GradingView,
    sandbox_opener: Callable[[], Any],
    budget: float = DEFAULT_BUDGET,
    cache: OutcomeCache | None = None,
    progress: Callable[[str], None] | None = None,
    parallel: int = PARALLEL,
) -> Evidence:
    """Run every probe on base and each distinct candidate, within the budget.

    Args:
        view: the group.
        sandbox_opener: opens the task's sandbox (called only when some outcome is not cached).
        budget: wall-time seconds for the whole stage.
        cache: where outcomes are kept; None for the default under the data cache.
        progress: called with one line per probe done.
        parallel: targets run at once.

    Returns:
        The evidence. A sandbox that cannot be opened, or fails, makes `skipped` say why; nothing is raised
        for what a probe or a candidate does.
    """
    started = time.monotonic()
    deadline = started + budget
    candidates = [members[0] for members in view.classes]
    evidence = Evidence(view.group_id, candidates=candidates)
    cache = cache or OutcomeCache()
    say = progress or (lambda line: None)
    probes = plan(view, candidates)
    if not probes:
        evidence.skipped = "the statement has no runnable snippet and the task no test command"
        return evidence
    environment = environment_key(view)
    trees = {t: tree_key(view, t) for t in [BASE, *candidates]}
    lock = threading.Lock()
    sandbox: Any = None

    def opened() -> Any:
        nonlocal sandbox
        with lock:
            if sandbox is None:
                sandbox = sandbox_opener()
            return sandbox

    def run(probe: Probe, target: str, limit: float) -> Outcome:
        cached = cache.get(environment, trees[target], probe.key)
        if cached is not None:
            with lock:
                evidence.cached += 1
            return cached
        remaining = deadline - time.monotonic()
        if remaining < 1:
            return Outcome("not-run", output="the stage's budget ran out")
        seconds = min(limit, remaining)
        result = opened().exec(target, probe.command, timeout=seconds, env=dict(probe.env))
        outcome = outcome_of(result, timeout_cut=seconds < limit)
        with lock:
            evidence.ran += 1
        if outcome.status != "not-run":
            cache.put(environment, trees[target], probe.key, outcome)
        return outcome

    try:
        with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="evidence") as pool:
            for index, probe in enumerate(probes, 1):
                base = run(probe, BASE, probe.timeout)
                if base.status == "not-run":
                    evidence.notes.append(f"{probe.name}: did not run on base ({base.output or 'no start'})")
                    continue
                if probe.kind == "tests" and (
                    base.status == "timeout" or not base.tests or base.seconds > probe.timeout
                ):
                    evidence.notes.append(
                        f"{probe.name}: not cheap or not readable on base "
                        f"({base.short()}, {base.seconds:.0f} s)"
                    )
                    continue
                limit = probe.timeout
                if probe.kind == "tests":
                    limit = min(probe.timeout, max(30.0, 3 * base.seconds))
                futures = {t: pool.submit(run, probe, t, limit) for t in candidates}
                evidence.outcomes[probe.name] = {BASE: base, **{t: f.result() for t, f in futures.items()}}
                evidence.probes.append(probe)  # after its outcomes: a sandbox failure above leaves neither
                done = time.monotonic() - started
                say(
                    f"{view.group_id}: {probe.name} on {len(candidates) + 1} targets "
                    f"({index}/{len(probes)}, {done:.0f} s)"
                )
    except GagarError as exc:
        if evidence.probes:  # what ran before the failure still counts
            evidence.notes.append(f"the sandbox failed after {len(evidence.probes)} probe(s): {exc}")
        else:
            evidence.skipped = f"the sandbox failed: {exc}"
    finally:
        if sandbox is not None:
            sandbox.close()
    evidence.seconds = time.monotonic() - started
    return evidence
