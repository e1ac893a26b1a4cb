"""Benchmark: building a group's workspace with gagar against two baselines, on a real, large source tree.

The tree is the Django sdist (about 6,800 files) committed once; the candidates are seeded, realistic patches
made by `git diff` in a scratch clone. For each group size it times, from one run:

* gagar: `open_workspace(group, mirrors=MirrorCache(...))` with the mirror already cached, entry and exit
  (build, verify, classes, removal of the workspace);
* naive: per candidate a full `git worktree add` checkout, `git apply`, `git add -A`, `git commit`;
* plumbing: per candidate `read-tree` / `apply --cached` / `write-tree` / `commit-tree` / `update-ref` with
  GIT_INDEX_FILE set, as one bash script.

Run from the repository root: `python -m bench.workspace` (full) or `python -m bench.workspace --quick`.
Exit status: 0, 1 if a patch failed to apply or the three methods built different trees, 2 if a speed target
was missed (full runs only).
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/workspace.py`: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.groups.models import Group, Task, Trajectory, complete_group  # noqa: E402
from grader.util.cachedirs import data_cache  # noqa: E402
from grader.workspace.gitcmd import SAFE_CONFIG, git_identity, safe_env  # noqa: E402
from grader.workspace.mirrors import MirrorCache  # noqa: E402
from grader.workspace.workspace import open_workspace  # noqa: E402

DJANGO_VERSION = "5.1.15"  # pinned so file counts and patches are the same on every machine and every day
BASE_DATE = "1723075200 +0000"
NAIVE_TARGET = 40.0  # gagar at least this many times faster than a worktree per candidate
PLUMBING_TARGET = 1.0  # and no slower than the per-candidate plumbing loop


# -- git ---------------------------------------------------------------------------------------------------


def bench_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """gagar's own git environment and configuration, so the baselines run git exactly as gagar does."""
    env = safe_env()
    env["GIT_CONFIG_COUNT"] = str(len(SAFE_CONFIG))
    for i, item in enumerate(SAFE_CONFIG):
        key, value = item.split("=", 1)
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    env.update(git_identity(date=BASE_DATE))
    if extra:
        env.update(extra)
    return env


def run_git(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=bench_env(env), capture_output=True, stdin=subprocess.DEVNULL
    )
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} exited {proc.returncode}: {proc.stderr.decode().strip()}")
    # Bytes decoded by hand, not text mode: universal newlines would rewrite the diffs we produce.
    return proc.stdout.decode("utf-8", "surrogateescape")


# -- the source tree ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourceRepo:
    path: Path
    version: str
    base_commit: str
    files: int


def default_cache_dir() -> Path:
    """Outside the repository and reused across runs: `$GAGAR_CACHE/bench` or `~/.cache/gagar/bench`."""
    return data_cache() / "bench"


def fetch_sdist(cache: Path, version: str) -> Path:
    sdists = cache / "sdist"
    pattern = f"[dD]jango-{version}.tar.gz"
    found = sorted(sdists.glob(pattern))
    if not found:
        print(f"downloading the Django {version} sdist from PyPI ...", flush=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"django=={version}",
                "-d",
                str(sdists),
            ],
            check=True,
        )
        found = sorted(sdists.glob(pattern))
        if not found:
            raise RuntimeError(f"pip download left no {pattern} in {sdists}")
    return found[-1]


def prepare_repo(cache: Path, version: str) -> SourceRepo:
    """A bare repository holding the extracted sdist as one commit with a fixed author and date, packed."""
    sdist = fetch_sdist(cache, version)
    name = sdist.name.removesuffix(".tar.gz").lower()
    path = cache / f"{name}.git"
    ready = cache / f"{name}.ready"
    if ready.exists() and path.exists():
        base_commit, files = ready.read_text().split()
        return SourceRepo(path, name.split("-", 1)[1], base_commit, int(files))
    print(f"building {path} from {sdist.name} ...", flush=True)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{name}.tmp", dir=cache))
    try:
        with tarfile.open(sdist) as archive:
            archive.extractall(tmp / "src", filter="data")
        (top,) = (tmp / "src").iterdir()
        git_dir = tmp / "repo.git"
        run_git(["init", "--bare", "--quiet", "--initial-branch=main", str(git_dir)])
        index = {"GIT_INDEX_FILE": str(tmp / "index")}
        # -f: an sdist's files are the tree, whatever ignore files it carries.
        run_git([f"--git-dir={git_dir}", f"--work-tree={top}", "add", "-A", "-f"], env=index)
        tree = run_git([f"--git-dir={git_dir}", "write-tree"], env=index).strip()
        commit = run_git([f"--git-dir={git_dir}", "commit-tree", tree, "-m", f"{sdist.name}"]).strip()
        run_git([f"--git-dir={git_dir}", "update-ref", "refs/heads/main", commit])
        # Packed like any real mirror: loose objects would make every read-tree several times slower.
        run_git([f"--git-dir={git_dir}", "repack", "-a", "-d", "-q"])
        run_git([f"--git-dir={git_dir}", "prune-packed"])
        files = len(run_git([f"--git-dir={git_dir}", "ls-tree", "-r", "--name-only", commit]).splitlines())
        shutil.rmtree(path, ignore_errors=True)
        git_dir.rename(path)
        ready.write_text(f"{commit} {files}\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return SourceRepo(path, name.split("-", 1)[1], commit, files)


# -- candidate patches -------------------------------------------------------------------------------------

_DEF = re.compile(r"^(?P<indent> *)def (?P<name>\w+)\((?P<params>[^()]*)\)(?: -> [^:]+)?:\s*$")
_RETURN = re.compile(r"^(?P<indent> +)return (?P<expr>\S.*)$")
_ASSIGN = re.compile(r"^ +(?P<name>[a-z_][a-z0-9_]{2,}) = \S")
_CALL = re.compile(r"^ +[\w.]+\(.*\)$")
_TEST_METHOD = re.compile(r"^    def test_\w+\(self\):$")

COMMENTS = [
    "Normalize first so that equal values compare equal regardless of type.",
    "Keep the original ordering; callers rely on it.",
    "Avoid a second lookup when the value is already cached.",
    "This can be reached with an empty value from the admin.",
    "Don't mutate the caller's object.",
    "Fall back to the default database alias.",
]
TEST_CHECKS = [
    ("sorted([3, 1, 2])", "[1, 2, 3]"),
    ('"-".join(["a", "b", "c"])', '"a-b-c"'),
    ("len(range(10))", "10"),
    ('int("42")', "42"),
    ('"Django".lower()', '"django"'),
    ("dict(a=1) | dict(b=2)", '{"a": 1, "b": 2}'),
    ("max([4, 9, 2])", "9"),
]
NEW_MODULES = [
    "text_normalization",
    "cache_keys",
    "query_hints",
    "header_parsing",
    "form_defaults",
    "lazy_paths",
]


@dataclass(frozen=True)
class Function:
    start: int  # the def line
    end: int  # one past the last body line
    indent: str  # the body's
    params: tuple[str, ...]


def find_functions(lines: list[str]) -> list[Function]:
    """Single-line-signature functions of 3 to 80 lines (long enough to edit, short enough to be typical)."""
    found = []
    for i, line in enumerate(lines):
        if not (m := _DEF.match(line)):
            continue
        outer = len(m["indent"])
        body: int | None = None
        j = i + 1
        while j < len(lines):
            if lines[j].strip():
                width = len(lines[j]) - len(lines[j].lstrip(" "))
                if width <= outer:
                    break
                body = width if body is None else body
            j += 1
        while j > i + 1 and not lines[j - 1].strip():
            j -= 1
        if body is None or not 3 <= j - i <= 80:
            continue
        params = [p.split(":")[0].split("=")[0].strip() for p in m["params"].split(",")]
        kept = tuple(p for p in params if p.isidentifier() and p not in ("self", "cls"))
        found.append(Function(i, j, " " * body, kept))
    return found


def first_statement(lines: list[str], f: Function) -> int:
    """The index of the first line after the docstring, if any."""
    k = f.start + 1
    head = lines[k].strip().lstrip("rbuRBU")
    for quote in ('"""', "'''"):
        if head.startswith(quote):
            if head.count(quote) >= 2 and len(head) > 3:
                return k + 1
            k += 1
            while k < f.end and quote not in lines[k]:
                k += 1
            return k + 1
    return k


def at_body_level(lines: list[str], f: Function, start: int) -> list[int]:
    width = len(f.indent)
    return [
        k
        for k in range(start, f.end)
        if lines[k].startswith(f.indent) and len(lines[k]) > width and lines[k][width] not in " #@)]}"
    ]


def balanced(text: str) -> bool:
    return all(text.count(a) == text.count(b) for a, b in ("()", "[]", "{}")) and not text.endswith(
        ("\\", ",")
    )


def edit_function(lines: list[str], f: Function, rng: random.Random) -> list[str] | None:
    """One plausible change to one function: a guard, a refactored return, a rename, a comment, a deletion."""
    start = first_statement(lines, f)
    statements = at_body_level(lines, f, start)
    if not statements:
        return None
    ind = f.indent
    kinds = ["guard", "return", "rename", "comment", "delete"]
    rng.shuffle(kinds)
    for kind in kinds:
        new = lines[:]
        if kind == "guard" and f.params:
            p = rng.choice(f.params)
            new[statements[0] : statements[0]] = [
                f"{ind}if {p} is None:",
                f'{ind}    raise ValueError("{p} is required.")',
            ]
            return new
        if kind == "return":
            # A bare name is left alone: `result = result` is no edit anyone would make.
            returns = [
                k
                for k in range(start, f.end)
                if (m := _RETURN.match(lines[k])) and balanced(m["expr"]) and not m["expr"].isidentifier()
            ]
            if returns:
                k = rng.choice(returns)
                m = _RETURN.match(lines[k])
                assert m is not None
                new[k : k + 1] = [f"{m['indent']}result = {m['expr']}", f"{m['indent']}return result"]
                return new
        if kind == "rename":
            names = sorted({m["name"] for k in statements if (m := _ASSIGN.match(lines[k]))} - set(f.params))
            if names:
                name = rng.choice(names)
                pattern = re.compile(rf"(?<![.\w'\"]){name}\b")
                for k in range(start, f.end):
                    new[k] = pattern.sub(f"{name}_value", new[k])
                return new
        if kind == "comment":
            k = rng.choice(statements)
            new[k:k] = [f"{ind}# {rng.choice(COMMENTS)}"]
            return new
        if kind == "delete" and len(statements) > 1:
            calls = [k for k in statements if _CALL.match(lines[k]) and balanced(lines[k])]
            if calls:
                del new[rng.choice(calls)]
                return new
    return None


def edit_source(text: str, rng: random.Random) -> str:
    """1 to 3 edits in distinct, non-nested functions of one module."""
    lines = text.split("\n")
    chosen: list[Function] = []
    wanted = rng.choice([1, 1, 2, 3])
    functions = find_functions(lines)
    rng.shuffle(functions)
    for f in functions:
        if len(chosen) == wanted:
            break
        if all(f.end <= c.start or f.start >= c.end for c in chosen):
            chosen.append(f)
    for f in sorted(chosen, key=lambda f: f.start, reverse=True):  # bottom up: earlier indices stay valid
        lines = edit_function(lines, f, rng) or lines
    return "\n".join(lines)


def edit_test(text: str, rng: random.Random, n: int) -> str:
    """A new test method inserted before an existing one."""
    lines = text.split("\n")
    k = rng.choice([i for i, line in enumerate(lines) if _TEST_METHOD.match(line)])
    expr, expected = rng.choice(TEST_CHECKS)
    method = [
        f"    def test_regression_{n}(self):",
        f"        value = {expr}",
        f"        self.assertEqual(value, {expected})",
    ]
    if rng.random() < 0.5:
        method.append("        self.assertIsNotNone(value)")
    lines[k:k] = [*method, ""]
    return "\n".join(lines)


def new_module(rng: random.Random, n: int) -> tuple[str, str]:
    topic = rng.choice(NEW_MODULES)
    lines = [f'"""Helpers for {topic.replace("_", " ")}."""', "", ""]
    for j in range(rng.randint(1, 3)):
        lines += [
            f"def {topic}_{j}(value, default=None):",
            f'    """Return ``value`` prepared for {topic.replace("_", " ")}, or ``default`` when empty."""',
            "    if value is None:",
            "        return default",
        ]
        lines += [
            f"    value = value.{rng.choice(['strip', 'lower', 'casefold'])}()"
            for _ in range(rng.randint(1, 4))
        ]
        lines += ["    return value or default", "", ""]
    return f"django/utils/{topic}_{n}.py", "\n".join(lines[:-2]) + "\n"


@dataclass
class PatchSet:
    patches: list[str]
    added_files: int = 0
    touch_tests: int = 0
    duplicates: int = 0


def generate_patches(repo: SourceRepo, count: int, seed: int, scratch: Path) -> PatchSet:
    """`count` candidate patches from one seeded generator, each a real `git diff --cached` in a clone.

    Like a real group they share a task: edits come from a pool of 8 modules drawn from one or a few Django
    packages and 4 test modules, and some candidates converge on an earlier candidate's exact patch.
    """
    rng = random.Random(f"gagar-bench-{seed}")
    run_git(["clone", "--quiet", "--shared", str(repo.path), str(scratch)])
    tracked = run_git(["ls-files"], cwd=scratch).splitlines()
    sources = [
        p for p in tracked if p.startswith("django/") and p.endswith(".py") and "/migrations/" not in p
    ]
    tests = [p for p in tracked if p.startswith("tests/") and p.endswith("/tests.py")]
    areas = sorted({"/".join(p.split("/")[:2]) for p in sources if p.count("/") >= 2})
    pool: list[str] = []
    while len(pool) < 8:
        area = rng.choice(areas)
        for path in rng.sample(sources, len(sources)):
            if (
                path.startswith(area + "/")
                and len(find_functions((scratch / path).read_text().split("\n"))) >= 3
            ):
                pool.append(path)
            if len(pool) >= 8:
                break
    test_pool: list[str] = []
    for path in rng.sample(tests, len(tests)):
        if len(test_pool) < 4 and any(
            _TEST_METHOD.match(line) for line in (scratch / path).read_text().split("\n")
        ):
            test_pool.append(path)
    result = PatchSet([])
    for n in range(count):
        if n >= 2 and rng.random() < 0.2:
            result.patches.append(result.patches[rng.randrange(n)])
            result.duplicates += 1
            continue
        touch_test = rng.random() < 0.4
        sources_touched = rng.sample(
            pool, rng.choice([1, 1, 1, 2, 2, 3]) if not touch_test else rng.choice([1, 1, 2, 3])
        )
        for path in sources_touched:
            file = scratch / path
            file.write_text(edit_source(file.read_text(), rng))
        if touch_test:
            file = scratch / rng.choice(test_pool)
            file.write_text(edit_test(file.read_text(), rng, n))
            result.touch_tests += 1
        if rng.random() < 0.25:
            path, text = new_module(rng, n)
            (scratch / path).write_text(text)
            result.added_files += 1
        run_git(["add", "-A"], cwd=scratch)
        patch = run_git(["diff", "--cached", "--no-color"], cwd=scratch)
        if not patch:  # every chosen function refused every edit: rare, but a candidate must change something
            (scratch / pool[0]).write_text((scratch / pool[0]).read_text() + f"\n# candidate {n}\n")
            run_git(["add", "-A"], cwd=scratch)
            patch = run_git(["diff", "--cached", "--no-color"], cwd=scratch)
        result.patches.append(patch)
        run_git(["reset", "--quiet", "--hard"], cwd=scratch)
    return result


def make_group(repo: SourceRepo, patches: list[str]) -> Group:
    """Half the trajectories pass; gagar builds a branch (or a failing ref) for every one of them anyway."""
    trajectories = [
        Trajectory(id=f"t{n:03d}", patch=p, reward=float(n % 2 == 0)) for n, p in enumerate(patches)
    ]
    task = Task(repo=str(repo.path), base_commit=repo.base_commit)
    return complete_group(
        Group(group_id=f"django-bench-{len(patches)}", task=task, trajectories=trajectories)
    )


# -- the three methods -------------------------------------------------------------------------------------


@dataclass
class Run:
    seconds: float
    trees: list[str]  # per candidate, in order; empty when not collected
    extra: float = 0.0  # gagar: seconds to the start of the `with` body (build only)


@contextmanager
def count_git_processes() -> Iterator[list[int]]:
    """Counts `git` processes started through subprocess.run (all of gagar's git calls go there)."""
    counter = [0]
    original = subprocess.run

    def counting(args, *a, **kw):  # type: ignore[no-untyped-def]
        if isinstance(args, list) and args and args[0] == "git":
            counter[0] += 1
        return original(args, *a, **kw)

    subprocess.run = counting  # type: ignore[assignment]
    try:
        yield counter
    finally:
        subprocess.run = original  # type: ignore[assignment]


def run_gagar(group: Group, mirrors: MirrorCache, workers: int | None, trees: bool = False) -> Run:
    kwargs = {} if workers is None else {"workers": workers}
    collected: list[str] = []
    start = time.perf_counter()
    with open_workspace(group, mirrors=mirrors, **kwargs) as ws:
        entered = time.perf_counter()
        bad = [f"{c.trajectory_id}: {c.error}" for c in ws.candidates.values() if not c.applied]
        if bad:
            raise RuntimeError("gagar did not build every branch: " + "; ".join(bad[:3]))
        if trees:
            commits = "\n".join(ws.candidates[t.id].commit or "" for t in group.trajectories) + "\n"
            proc = subprocess.run(
                ["git", f"--git-dir={ws.git_dir}", "cat-file", "--batch-check=%(objectname)"],
                input=commits.replace("\n", "^{tree}\n").encode(),
                capture_output=True,
                env=bench_env(),
                check=True,
            )
            collected = proc.stdout.decode().split()
    end = time.perf_counter()
    return Run(end - start, collected, extra=entered - start)


PLUMBING = r"""
set -euo pipefail
git init --bare --quiet "$WS/repo.git"
echo "$MIRROR/objects" > "$WS/repo.git/objects/info/alternates"
export GIT_DIR="$WS/repo.git" GIT_INDEX_FILE="$WS/index"
i=0
for patch in "$PATCHES"/*.patch; do
    git read-tree "$BASE"
    git apply --cached "$patch"
    tree=$(git write-tree)
    commit=$(git commit-tree "$tree" -p "$BASE" -m "trajectory $i")
    git update-ref "refs/heads/candidates/$i" "$commit"
    i=$((i + 1))
done
"""

NAIVE = r"""
set -euo pipefail
git clone --quiet --shared --no-checkout "$MIRROR" "$WS/clone"
cd "$WS/clone"
i=0
for patch in "$PATCHES"/*.patch; do
    wt="$WS/worktrees/$i"
    git worktree add --quiet -b "candidates/$i" "$wt" "$BASE"
    git -C "$wt" apply "$patch"
    git -C "$wt" add -A
    git -C "$wt" commit --quiet -m "trajectory $i"
    i=$((i + 1))
done
"""


def run_script(script: str, git_dir: str, mirror: Path, base: str, patch_dir: Path, scratch: Path) -> Run:
    """Time one bash script as a whole; setup (init or clone) is inside it, removal is not."""
    ws = Path(tempfile.mkdtemp(prefix="bench-", dir=scratch))
    env = bench_env({"WS": str(ws), "MIRROR": str(mirror), "BASE": base, "PATCHES": str(patch_dir)})
    try:
        start = time.perf_counter()
        proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"baseline script failed: {proc.stderr.decode().strip()[-2000:]}")
        listing = run_git(
            [
                f"--git-dir={ws / git_dir}",
                "for-each-ref",
                "--format=%(refname:lstrip=-1) %(tree)",
                "refs/heads/candidates/",
            ]
        )
        by_index = dict(line.split() for line in listing.splitlines())
        return Run(seconds, [by_index[str(i)] for i in range(len(by_index))])
    finally:
        shutil.rmtree(ws, ignore_errors=True)


# -- measuring and reporting ------------------------------------------------------------------------------


@dataclass
class Row:
    size: int
    gagar: float
    build: float
    gagar_1: float
    plumbing: float
    naive: float
    processes: int

    @property
    def naive_ratio(self) -> float:
        return self.naive / self.gagar

    @property
    def plumbing_ratio(self) -> float:
        return self.plumbing / self.gagar


def median(runs: list[Run], key: Callable[[Run], float] = lambda r: r.seconds) -> float:
    return statistics.median(key(r) for r in runs)


def measure(
    repo: SourceRepo,
    mirrors: MirrorCache,
    patches: list[str],
    repeats: int,
    naive_repeats: int,
    scratch: Path,
) -> tuple[Row, list[str]]:
    """One group size: the row of medians, and any disagreement between the methods' trees."""
    group = make_group(repo, patches)
    mirror = mirrors.mirror(group.task.repo, group.task.base_commit)
    patch_dir = scratch / f"patches-{len(patches)}"
    patch_dir.mkdir()
    for n, t in enumerate(group.trajectories):
        (patch_dir / f"{n:04d}.patch").write_text(t.patch)

    def script(text: str, git_dir: str) -> Run:
        return run_script(text, git_dir, mirror, repo.base_commit, patch_dir, scratch)

    # Untimed: warm the page cache, check the build, count git processes, record the trees to compare.
    with count_git_processes() as processes:
        run_gagar(group, mirrors, None)
    reference = run_gagar(group, mirrors, None, trees=True).trees
    checks = {"plumbing": script(PLUMBING, "repo.git").trees}

    gagar: list[Run] = []
    gagar_1: list[Run] = []
    plumbing: list[Run] = []
    naive: list[Run] = []
    for r in range(repeats):  # interleaved, so a slow spell of the machine hits every method alike
        gagar.append(run_gagar(group, mirrors, None))
        gagar_1.append(run_gagar(group, mirrors, 1))
        plumbing.append(script(PLUMBING, "repo.git"))
        if r < naive_repeats:
            naive.append(script(NAIVE, "clone/.git"))
    checks["naive"] = naive[0].trees
    failures = []
    for name, trees in checks.items():
        if trees != reference:
            differ = sum(a != b for a, b in zip(trees, reference, strict=False)) + abs(
                len(trees) - len(reference)
            )
            failures.append(
                f"{len(patches)} candidates: {name} built {differ} trees that differ from gagar's"
            )
    row = Row(
        size=len(patches),
        gagar=median(gagar),
        build=median(gagar, lambda r: r.extra),
        gagar_1=median(gagar_1),
        plumbing=median(plumbing),
        naive=median(naive),
        processes=processes[0],
    )
    return row, failures


def print_table(rows: list[Row]) -> list[tuple[str, bool]]:
    """The table, then one PASS/FAIL line per target; returns the targets."""
    print()
    print("gagar: open_workspace() entry to exit (build, verify, classes, removal), default workers (4);")
    print("       build: to the start of the with body; w=1: workers=1; git procs: git processes per build")
    print("naive, plumbing: one bash script each, setup (clone / init) included, removal excluded")
    header = (
        f"{'size':>4}  {'gagar':>8}  {'build':>8}  {'gagar w=1':>9}  {'plumbing':>8}  {'naive':>8}  "
        f"{'naive/gagar':>11}  {'plumbing/gagar':>14}  {'git procs':>9}"
    )
    print(header)
    print("-" * len(header))
    targets = []
    for row in rows:
        print(
            f"{row.size:>4}  {row.gagar:>7.3f}s  {row.build:>7.3f}s  {row.gagar_1:>8.3f}s  "
            f"{row.plumbing:>7.3f}s  {row.naive:>7.2f}s  {row.naive_ratio:>10.1f}x  "
            f"{row.plumbing_ratio:>13.2f}x  {row.processes:>9}"
        )
        targets.append(
            (
                f"{row.size:>3} candidates: naive/gagar {row.naive_ratio:.1f}x >= {NAIVE_TARGET:g}x",
                row.naive_ratio >= NAIVE_TARGET,
            )
        )
        targets.append(
            (
                f"{row.size:>3} candidates: plumbing/gagar {row.plumbing_ratio:.2f}x >= {PLUMBING_TARGET:g}x",
                row.plumbing_ratio >= PLUMBING_TARGET,
            )
        )
    print()
    for text, ok in targets:
        print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return targets


def describe(generated: PatchSet, seed: int, seconds: float) -> str:
    lines = [
        sum(1 for line in p.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---"))
        for p in generated.patches
    ]
    files = [sum(line.startswith("diff --git ") for line in p.splitlines()) for p in generated.patches]
    return (
        f"patches: seed {seed}, {len(generated.patches)} made in {seconds:.1f}s; "
        f"{min(files)}-{max(files)} files (mean {statistics.mean(files):.1f}), "
        f"{min(lines)}-{max(lines)} changed lines (mean {statistics.mean(lines):.1f}); "
        f"{generated.added_files} add a module, {generated.touch_tests} touch a test, "
        f"{generated.duplicates} repeat an earlier candidate"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 candidates, 1 repeat: a smoke test")
    parser.add_argument("--sizes", default=None, help="comma-separated group sizes (default 16,64; quick: 8)")
    parser.add_argument("--repeats", type=int, default=None, help="gagar, plumbing runs per size (default 5)")
    parser.add_argument("--naive-repeats", type=int, default=None, help="naive runs per size (default 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache-dir", type=Path, default=None, help=f"default {default_cache_dir()}")
    parser.add_argument("--django-version", default=DJANGO_VERSION)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("8" if args.quick else "16,64")).split(",")]
    repeats = args.repeats or (1 if args.quick else 5)
    naive_repeats = min(repeats, args.naive_repeats or (1 if args.quick else 3))
    cache = (args.cache_dir or default_cache_dir()).expanduser().resolve()

    repo = prepare_repo(cache, args.django_version)
    print(f"source: Django {repo.version} sdist as one commit {repo.base_commit[:12]}: {repo.files:,} files")
    mirrors = MirrorCache(cache / "mirrors")
    mirrors.mirror(str(repo.path), repo.base_commit)  # warm: no timed run clones or fetches
    print(f"mirror: {mirrors.path_for(str(repo.path))} (cached)")

    scratch = Path(tempfile.mkdtemp(prefix="gagar-bench-"))
    rows: list[Row] = []
    failures: list[str] = []
    try:
        started = time.perf_counter()
        generated = generate_patches(repo, max(sizes), args.seed, scratch / "patches-clone")
        print(describe(generated, args.seed, time.perf_counter() - started))
        print(
            "groups: the first N patches; half the trajectories pass, and a branch (or failing ref) is built "
            f"for every one; gagar, plumbing: median of {repeats} runs, naive: median of {naive_repeats}",
            flush=True,
        )
        for size in sizes:
            row, problems = measure(repo, mirrors, generated.patches[:size], repeats, naive_repeats, scratch)
            rows.append(row)
            failures += problems
            print(
                f"  {size} candidates: gagar {row.gagar:.3f}s, plumbing {row.plumbing:.3f}s, "
                f"naive {row.naive:.2f}s",
                flush=True,
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    targets = print_table(rows)
    for failure in failures:
        print(f"ERROR  {failure}")
    if failures:
        return 1
    if not args.quick and not all(ok for _, ok in targets):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
