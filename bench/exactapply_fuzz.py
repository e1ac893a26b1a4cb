"""The in-process applier against git on a real history, mutated: the long run of
tests/workspace/test_applier_fuzz.py.

For each of the last `--commits` non-merge commits of a repository (first parent), its `git diff` against
its parent (a random context of 0 to 5 lines, renames detected or not) is applied to the parent as it is,
then `--mutants` times mutated by a class drawn from `tests.support.applier_fuzz_support.MUTATIONS`; the plain
patch also goes to the parent's `--older`-th ancestor (hunks drift, files differ) and to the parent's tree
rewritten with modes git no longer writes or entries out of order ("odd-base"). Patches made here from the
commit's files (overlapping hunks, hunks out of order, deletions; "synthetic") are applied and mutated too.

Each case goes to `git apply --cached` + `git write-tree` and to `grader.workspace.exactapply`. A divergence
is the applier making a tree where git refuses the patch or makes another; declining never is one. Nothing is
written to the repository read (git and the applier work in scratch repositories borrowing its objects).

    python bench/exactapply_fuzz.py                                   # this repository's own history
    python bench/exactapply_fuzz.py --repo /path/to/a/clone --commits 400 --seconds 110

Prints the cases, git's applies, the applier's takes and the divergences per class. Exits 1 on any
divergence. Target: 0.
"""

from __future__ import annotations

import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.args import parser_for  # noqa: E402
from grader.workspace.gitcmd import safe_env  # noqa: E402
from tests.support.applier_fuzz_support import (  # noqa: E402
    Oracle,
    Tally,
    mutants,
    odd_base,
    synthetic_patches,
    touched_paths,
)

MAX_FILE_BYTES = 200_000


def git(repo: Path, *args: str, check: bool = True) -> bytes:
    proc = subprocess.run(
        ["git", f"--git-dir={repo}", *args], env=safe_env(), capture_output=True, check=check
    )
    return proc.stdout


def text_files(repo: Path, commit: str, paths: list[str]) -> dict[str, str]:
    """The text files among `paths` at `commit` (no NUL, not too big), decoded as the workspace does."""
    files: dict[str, str] = {}
    for path in paths:
        raw = subprocess.run(
            ["git", f"--git-dir={repo}", "cat-file", "blob", f"{commit}:{path}"],
            env=safe_env(),
            capture_output=True,
        ).stdout
        if raw and b"\0" not in raw and len(raw) < MAX_FILE_BYTES and raw.count(b"\n") >= 8:
            files[path] = raw.decode("utf-8", "surrogateescape")
    return files


def main() -> None:
    parser = parser_for(__doc__)
    root = Path(__file__).resolve().parent.parent
    parser.add_argument("--repo", type=Path, default=root, help="a git repository (default: this one)")
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--mutants", type=int, default=10, help="mutated patches per real patch")
    parser.add_argument(
        "--older", type=int, default=10, help="how many commits before the parent to apply to"
    )
    parser.add_argument("--seconds", type=float, default=100.0, help="stop taking new commits after this")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    found = subprocess.run(
        ["git", "-C", str(args.repo), "rev-parse", "--absolute-git-dir", "--git-common-dir"],
        env=safe_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    repo, common = Path(found[0]), Path(found[1])
    objects = (common if common.is_absolute() else args.repo / common).resolve() / "objects"
    rng = random.Random(args.seed)
    commits = git(repo, "rev-list", "--first-parent", "--no-merges", f"--max-count={args.commits}", "HEAD")
    tally = Tally()
    started = time.perf_counter()
    used = 0
    with tempfile.TemporaryDirectory() as tmp:
        oracle = Oracle(objects, Path(tmp))
        for commit in commits.decode().split():
            if time.perf_counter() - started > args.seconds:
                break
            parent = git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^", check=False).decode().strip()
            if not parent:
                continue
            flags = [f"-U{rng.choice([0, 1, 3, 3, 3, 5])}", *(["-M"] if rng.random() < 0.5 else [])]
            real = git(repo, "diff", "--no-color", "--full-index", *flags, parent, commit)
            if not real:
                continue
            used += 1
            patch = real.decode("utf-8", "surrogateescape")
            base = git(repo, "rev-parse", f"{parent}^{{tree}}").decode().strip()
            for kind, text in mutants(rng, patch, args.mutants):
                tally.add(kind, oracle, base, text)
            older = git(
                repo, "rev-parse", "--verify", "--quiet", f"{parent}~{args.older}^{{tree}}", check=False
            )
            if older.strip():
                tally.add("older-base", oracle, older.decode().strip(), patch)
            odd = odd_base(rng, oracle.git_dir, base, touched_paths(patch))
            if odd is not None:
                tally.add("odd-base", oracle, odd, patch)
            files = text_files(repo, parent, touched_paths(patch))
            if files:
                made_here = synthetic_patches(rng, files)
                for _ in range(2):
                    synthetic = next(made_here)
                    tally.add("synthetic", oracle, base, synthetic)
                    for kind, text in list(mutants(rng, synthetic, 2))[1:]:
                        tally.add(kind, oracle, base, text)
    elapsed = time.perf_counter() - started
    print(f"repository: {args.repo} ({used} commits with a diff, seed {args.seed}, {elapsed:.0f} s)")
    print(tally.table())
    for line in tally.divergences:
        print("DIVERGENCE", line)
    verdict = "PASS" if not tally.divergences else "FAIL"
    print(f"target: 0 divergences ({len(tally.divergences)}): {verdict}")
    sys.exit(0 if not tally.divergences else 1)


if __name__ == "__main__":
    main()
