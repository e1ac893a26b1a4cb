"""The in-process applier on a real repository's history: every tree it makes against git's, and its speed.

Each of the last `--commits` non-merge commits of a repository (first parent) gives a real patch, `git diff`
of the commit against its parent (renames detected, 3 lines of context, as a system's prediction would be).
Each is applied twice: to its own parent, where git diff output sits exactly (the case a workspace build
meets), and to the parent's `--older`-th ancestor, where hunks drift and files differ (what a stale base
makes). Both ways, `grader.workspace.exactapply` and `git apply --cached` + `git write-tree` must agree: the
same tree
whenever exactapply takes a patch, and git must then apply it too. What exactapply declines is counted by
reason (git applies those in a build).

The baseline, timed in the same run over the same patches, is git's two processes per patch (the base's index
read beforehand, untimed, as a build keeps it). exactapply is timed twice: with a cold memo of base files (one
`git cat-file --batch`), as the first group of a task meets it, and warm, as its other groups do.

    python bench/exactapply_corpus.py --repo /path/to/a/clone          # 300 commits
    python bench/exactapply_corpus.py --repo DIR --commits 1000 --older 20

Exits 1 on any disagreement. Target: none, and exactapply warm at least 2x faster than git's processes.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.args import parser_for  # noqa: E402
from grader import bare, exactapply, gitobjects  # noqa: E402
from grader.workspace.gitcmd import safe_env  # noqa: E402

TARGET_SPEEDUP = 2.0


def git(repo: Path, *args: str, env: dict[str, str] | None = None, input: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={repo}", *args],
        env=env or safe_env(),
        input=input,
        capture_output=True,
        check=True,
    ).stdout


def git_tree(repo: Path, patch: bytes, index: Path) -> str | None:
    """What git makes of the base whose index is `index` with `patch` (None when it refuses)."""
    env = safe_env({"GIT_INDEX_FILE": str(index)})
    applied = subprocess.run(
        ["git", f"--git-dir={repo}", "apply", "--cached", "-"], env=env, input=patch, capture_output=True
    )
    if applied.returncode != 0:
        return None
    return git(repo, "write-tree", env=env).decode().strip()


def reason_kind(reason: str) -> str:
    """A declined patch's reason without its paths and numbers, to count by."""
    for kind in (
        "extended header",
        "not where its header says",
        "must match the whole file",
        "same plain path",
        "unusual characters",
        "touched twice",
        "not a regular file",
        "a new file where the base has one",
        "removal leaves content",
        "binary file",
        "is not a directory",
        "is a blob",
        "fit its counts",
        "outside a file's diff",
    ):
        if kind in reason:
            return kind
    return reason[:60]


def main() -> None:
    parser = parser_for(__doc__)
    parser.add_argument("--repo", type=Path, required=True, help="a git repository (bare or not)")
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument(
        "--older", type=int, default=10, help="how many commits before the parent to apply to"
    )
    args = parser.parse_args()
    repo = Path(git(args.repo, "rev-parse", "--absolute-git-dir").decode().strip())
    commits = git(repo, "rev-list", "--first-parent", "--no-merges", f"--max-count={args.commits}", "HEAD")
    counts: Counter[str] = Counter()
    declined: Counter[str] = Counter()
    mismatches: list[str] = []
    seconds = {"git": 0.0, "cold": 0.0, "warm": 0.0}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for commit in commits.decode().split():
            parent = git(repo, "rev-parse", f"{commit}^").decode().strip()
            patch = git(repo, "diff", "--no-color", "-M", parent, commit)
            if not patch:
                continue
            older = (
                subprocess.run(
                    ["git", f"--git-dir={repo}", "rev-parse", f"{parent}~{args.older}"], capture_output=True
                )
                .stdout.decode()
                .strip()
            )
            for where, base in (("own parent", parent), (f"parent~{args.older}", older)):
                if not base:
                    continue
                base_tree = git(repo, "rev-parse", f"{base}^{{tree}}").decode().strip()
                git(repo, "read-tree", base, env=safe_env({"GIT_INDEX_FILE": str(work / "index")}))
                started = time.perf_counter()
                expected = git_tree(repo, patch, work / "index")
                seconds["git"] += time.perf_counter() - started
                git_dir = work / f"ws-{commit[:12]}-{where[:3]}.git"
                bare.init_bare(git_dir, repo / "objects", head="refs/heads/base")
                text = patch.decode("utf-8", "surrogateescape")
                memo = gitobjects.BaseFiles()
                try:
                    for memo_state in ("cold", "warm"):
                        started = time.perf_counter()
                        try:
                            buffer = gitobjects.ObjectBuffer()
                            ours = exactapply.apply_patch(text, git_dir, base_tree, memo, buffer.add)
                            buffer.flush(git_dir / "objects")
                        finally:
                            seconds[memo_state] += time.perf_counter() - started
                except exactapply.Declined as why:
                    counts[f"{where}: declined"] += 1
                    declined[reason_kind(str(why))] += 1
                    continue
                counts[f"{where}: applied in process"] += 1
                if ours != expected:
                    mismatches.append(f"{commit[:12]} on {where}: exactapply {ours}, git {expected}")
    for key in sorted(counts):
        print(f"{key:<36} {counts[key]:>5}")
    print("declined, by reason:", ", ".join(f"{k} {n}" for k, n in declined.most_common()))
    total = sum(counts.values())
    each = {k: v / total * 1000 for k, v in seconds.items()}
    speedup = seconds["git"] / seconds["warm"] if seconds["warm"] else float("inf")
    print(
        f"{total} applies, per apply (taken or declined): git apply + write-tree {each['git']:.2f} ms; "
        f"exactapply cold {each['cold']:.2f} ms ({each['git'] / each['cold']:.1f}x), "
        f"warm {each['warm']:.2f} ms ({speedup:.1f}x)"
    )
    for line in mismatches:
        print("MISMATCH", line)
    verdict = "PASS" if not mismatches and speedup >= TARGET_SPEEDUP else "FAIL"
    print(f"target: 0 disagreements ({len(mismatches)}), at least {TARGET_SPEEDUP:g}x: {verdict}")
    sys.exit(0 if not mismatches else 1)


if __name__ == "__main__":
    main()
