"""How long a trainer waits for grading: submit, other work, collect, against collecting straight away.

The real LLM grader talks to a scripted OpenAI-compatible server (real HTTP) that answers each grading with
its ranking after `--latency` seconds (2 s by default: one grading turn of a fast model). `--groups` copies
of the bundled example group are graded per step, `--workers` at once.

- baseline: `submit(rows)` then `weights(rows)` at once: the trainer waits for the whole grading;
- overlapped: `submit(rows)`, `--work` seconds of the trainer's other work (log-probs; a sleep here, as the
  CPU waits on a GPU), then `weights(rows)`: the wait left is the grading time the work did not hide
  (about grading p95 minus `--work`; on a loaded machine the workspace builds stretch the grading);
- deadline: `weights(rows, deadline=--deadline)` with no other work: returns at the deadline, groups late.

    python bench/trainer_wait.py              # 8 groups, 2 s grader, 2.5 s of other work (about 10 s)

Targets: the other work is hidden: the overlapped wait is at most max(0, grading p95 - work) + 0.2 s (on an
idle machine 8 gradings take about 2.6 s, so 0.1 s is left); the deadline is overrun by at most 0.2 s.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.args import parser_for  # noqa: E402
from grader.graders.llm.agent import Budgets, LLMGrader  # noqa: E402
from grader.groups.formats import load_group_file  # noqa: E402
from grader.integrations.batch import BatchGrader  # noqa: E402
from grader.pipeline import GradingOptions  # noqa: E402
from grader.servers.scripted import ScriptedServer, labels_in, tool_calls  # noqa: E402
from grader.util.concurrency import Concurrency  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "inventory_group.json"


def rows(step: int, groups: int) -> list[dict[str, object]]:
    """One step's rows: `groups` copies of the example group, with the default row mapping's names."""
    (group,) = load_group_file(EXAMPLE)
    task = {"repo": group.task.repo, "base_commit": group.task.base_commit}
    return [
        {"group_id": f"s{step}-g{g}", "trajectory_id": t.id, "passed": t.passed, "patch": t.patch, **task}
        for g in range(groups)
        for t in group.trajectories
    ]


def timing(metrics: dict[str, float]) -> tuple[float, float]:
    """(seconds the trainer waited, p95 seconds from submit to a group's result; nan when none finished)."""
    return metrics["gagar/waited"], metrics.get("gagar/latency_p95", float("nan"))


def main() -> None:
    parser = parser_for(__doc__)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--latency", type=float, default=2.0, help="seconds the scripted grader takes")
    parser.add_argument("--work", type=float, default=2.5, help="seconds of the trainer's other work")
    parser.add_argument("--deadline", type=float, default=1.0)
    args = parser.parse_args()

    def rank_as_shown(request: dict, n: int):  # one turn: the ranking, after `latency` seconds
        ranking = {"ranking": [[label] for label in labels_in(request)], "reasons": {}, "confidence": 1.0}
        return tool_calls(("submit_ranking", ranking), delay=args.latency)

    with ScriptedServer(rank_as_shown) as server:
        grader = LLMGrader("scripted", base_url=server.url, sandbox=None, budgets=Budgets(retries=0))
        options = GradingOptions(concurrency=Concurrency(llm_calls=args.workers))
        batch = BatchGrader(grader, options=options, workers=args.workers)
        batch.submit(rows(0, 1))  # warm: imports, mirror of the example repository
        batch.weights(rows(0, 1))

        figures = {}
        step = rows(1, args.groups)
        batch.submit(step)
        result = batch.weights(step)
        figures["baseline"] = (*timing(result.metrics), result.metrics["gagar/graded"])

        step = rows(2, args.groups)
        batch.submit(step)
        time.sleep(args.work)
        result = batch.weights(step)
        figures["overlapped"] = (*timing(result.metrics), result.metrics["gagar/graded"])

        step = rows(3, args.groups)
        batch.submit(step)
        result = batch.weights(step, deadline=args.deadline)
        figures["deadline"] = (*timing(result.metrics), result.metrics["gagar/late"])
        batch.discard_pending()
        batch.close()

    print(f"{args.groups} groups, grader {args.latency:g} s per grading, {args.workers} at once")
    print(f"{'run':11} {'waited s':>9} {'grading p95 s':>14} {'share':>6}")
    for name, what in (("baseline", "graded"), ("overlapped", "graded"), ("deadline", "late")):
        waited, p95, share = figures[name]
        print(f"{name:11} {waited:9.3f} {p95:14.3f} {share:6.2f} {what}")
    waited, p95, _ = figures["overlapped"]
    ratio = waited / figures["baseline"][0]
    unhidden = max(0.0, p95 - args.work)
    overrun = figures["deadline"][0] - args.deadline
    print(f"overlapped / baseline wait: {ratio:.3f}; grading left after the work {unhidden:.3f} s")
    print(f"{'PASS' if waited <= unhidden + 0.2 else 'FAIL'} overlapped wait <= unhidden grading + 0.2 s")
    print(f"{'PASS' if overrun <= 0.2 else 'FAIL'} deadline overrun <= 0.2 s")


if __name__ == "__main__":
    main()
