"""The heuristic's evidence stage: seconds per group (median, max) and its share of a grading's wall time.

For each group of a prepared swebench-lite track (optionally one split, at most --groups of them) it grades
twice in one run: the baseline with the stage off (`HeuristicGrader(evidence="off")`, diffs only), then with
it on, against a fresh outcome cache in a temporary folder (--warm: the user's cache, as a second grading of
the same patches would see it). The workspace is built once per group and not timed. It prints per group
the baseline's seconds, the graded-with-evidence seconds, the stage's own seconds and runs, then the median
and max of the stage and its share of the wall time with evidence (stage / graded), and the ratio of the
two gradings. Needs Docker and the task environments (built on first use: minutes per layer).

    python -m bench.evidence_stage --track verification --split dev --groups 4
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench.args import parser_for
from grader.evaluation.benchmark import load_benchmark
from grader.evaluation.prepare import prepared_root
from grader.graders.evidence.run import OutcomeCache
from grader.graders.heuristic import HeuristicGrader
from grader.workspace.workspace import open_workspace


def main() -> None:
    parser = parser_for(__doc__)
    parser.add_argument("--track", choices=("verification", "preference"), default="verification")
    parser.add_argument("--split", choices=("dev", "test"), default=None)
    parser.add_argument("--groups", type=int, default=4, help="at most this many groups (default 4)")
    parser.add_argument("--group", action="append", default=[], help="only these groups (repeatable)")
    parser.add_argument("--budget", type=float, default=300.0, help="the stage's budget per group")
    parser.add_argument("--warm", action="store_true", help="use the user's outcome cache")
    args = parser.parse_args()
    bench = load_benchmark(prepared_root() / "swebench-lite" / args.track)
    group_ids = [g for g in bench.group_ids(args.split) if not args.group or g in args.group][: args.groups]
    rows = []
    with tempfile.TemporaryDirectory(prefix="gagar-bench-evidence-") as tmp:
        cache = OutcomeCache() if args.warm else OutcomeCache(Path(tmp))
        baseline = HeuristicGrader(evidence="off")
        baseline.progress = None
        graded = HeuristicGrader(evidence_budget=args.budget)
        graded.outcome_cache, graded.progress = cache, None
        for group_id in group_ids:
            with open_workspace(bench.groups[group_id]) as workspace:
                view = workspace.view()
                started = time.perf_counter()
                baseline.grade(view)
                base_seconds = time.perf_counter() - started
                started = time.perf_counter()
                grade = graded.grade(view)
                with_seconds = time.perf_counter() - started
            evidence = grade.details["evidence"]
            rows.append((group_id, base_seconds, with_seconds, evidence["seconds"], evidence["runs"]))
            print(
                f"{group_id}: diffs only {base_seconds:.2f} s, with evidence {with_seconds:.1f} s, "
                f"stage {evidence['seconds']:.1f} s, {evidence['runs']} runs, {evidence['cached']} cached"
                + (f", skipped: {evidence['skipped']}" if evidence["skipped"] else ""),
                flush=True,
            )
    stage = [r[3] for r in rows]
    total = sum(r[2] for r in rows)
    print(
        f"\n{len(rows)} groups ({'warm' if args.warm else 'cold'} cache): stage median "
        f"{statistics.median(stage):.1f} s, max {max(stage):.1f} s; its share of the wall time with evidence "
        f"{sum(stage) / total:.1%}; grading with evidence / diffs only = "
        f"{total / max(1e-9, sum(r[1] for r in rows)):.0f}x"
    )


if __name__ == "__main__":
    main()
