"""A scripted reviewer on a real benchmark group, in its task environment, under the LLM grader's budgets.

The reviewer (a scripted policy on the project's loopback OpenAI-compatible server,
`grader.servers.scripted.ScriptedServer`) runs `tests` on every target of the group (base and each
candidate), `--test-runs` times (default 3: what issue 36 asks the defaults to allow), then makes 6 more
tool calls (list, two diffs, a read, a search and a probe with `run`), then
submits. It is graded by `LLMGrader` with the Docker sandbox in the task's environment (built or reused
first, off the clock), once with the default budgets (it must complete: "graded") and, with `--overrun S`,
once more with a sandbox-time budget of S seconds, which the test run overruns: the run is cut at the
budget, `run` is said to be unavailable after it, and the grading still ends in the reviewer's ranking,
the budget named in the tool results. Printed: each turn's time on the model's side and in the sandbox,
the usage, the outcome.

The group comes from a prepared benchmark (`gagar bench prepare swebench-lite ...`): its mirrors in the
machine's cache, its environment built by the sandbox. The machine's load is printed beside the figures.
Run: python bench/review_budgets.py [--group pytest-dev__pytest-7432] [--track verification] [--test-runs 3]
     [--overrun 120]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from grader.graders.llm.agent import Budgets, LLMGrader  # noqa: E402
from grader.graders.transcript import read_transcript  # noqa: E402
from grader.groups.formats import load_group_file  # noqa: E402
from grader.groups.models import Group  # noqa: E402
from grader.pipeline import GradingOptions, grade_group_sync  # noqa: E402
from grader.servers.scripted import Reply, ScriptedServer, assistant_turns, labels_in, tool_calls  # noqa: E402
from grader.util.cachedirs import machine_cache  # noqa: E402
from grader.workspace.mirrors import MirrorCache  # noqa: E402


def reviewer(package: str, test_runs: int):
    """The scripted reviewer: `tests` on every target `test_runs` times, 6 more calls, then a submission
    (all tied)."""

    def policy(request: dict[str, Any], n: int) -> Reply:
        labels = labels_in(request)
        steps = [
            # Each run a different shell line: a call repeated word for word is answered from the first.
            *[("run", {"command": "tests" + " 2>&1 | tail -n 400" * i}) for i in range(test_runs)],
            ("list_candidates", {}),
            ("diff", {"candidate": labels[0]}),
            ("diff", {"candidate": labels[-1], "against": labels[0]}),
            ("search", {"target": "base", "pattern": "def "}),
            ("read_file", {"target": labels[0], "path": "setup.py", "end_line": 20}),
            ("run", {"command": f"python -c 'import {package}; print({package}.__file__)'"}),
        ]
        step = assistant_turns(request)
        if step < len(steps) and "last turn" not in request["messages"][-1]["content"]:
            return tool_calls(steps[step])
        arguments = {"ranking": [labels], "reasons": {}, "confidence": 0.5}
        if len(request.get("tools", [])) == 1:  # the final turn's form
            arguments = {"tiers": dict.fromkeys(labels, 1), "reasons": {}, "confidence": 0.5}
        return tool_calls(("submit_ranking", arguments))

    return policy


def grade(group: Group, budgets: Budgets, transcripts: Path, test_runs: int) -> dict[str, Any]:
    """Grade `group` with the reviewer under `budgets`; the outcome, usage and each turn's times."""
    package = group.task.repo.rstrip("/").split("/")[-1].removesuffix(".git")
    package = {"pytest": "_pytest", "scikit-learn": "sklearn"}.get(package, package)
    options = GradingOptions(mirrors=MirrorCache(machine_cache() / "mirrors"), grade_all_pass=True)
    started = time.monotonic()
    with ScriptedServer(reviewer(package, test_runs)) as server:
        grader = LLMGrader(
            "scripted", base_url=server.url, sandbox="docker", budgets=budgets, transcript_dir=transcripts
        )
        result = grade_group_sync(group, grader, options)
    events = read_transcript(result.transcript) if result.transcript else []
    turns = [
        {"tool": e["name"], "seconds": e["seconds"], "error": e["error"], "head": e["content"][:160]}
        for e in events
        if e["type"] == "tool_result"
    ]
    return {
        "status": result.status,
        "reason": result.reason,
        "final_turn": result.details.get("final_turn"),
        "usage": result.usage,
        "wall": round(time.monotonic() - started, 1),
        "tool results": turns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group", default="pytest-dev__pytest-7432")
    parser.add_argument("--track", default="verification")
    parser.add_argument("--bench-root", type=Path, default=machine_cache() / "benchmarks/swebench-lite")
    parser.add_argument("--test-runs", type=int, default=3, help="full test runs on every target")
    parser.add_argument("--overrun", type=float, default=None, help="also grade with this sandbox budget")
    parser.add_argument("--transcripts", type=Path, default=Path("/tmp/gagar-review-budgets"))
    args = parser.parse_args()
    path = args.bench_root / args.track / "groups" / f"{args.track}.jsonl"
    (group,) = [g for g in load_group_file(path) if getattr(g, "group_id", None) == args.group]
    print(f"group {args.group}: {len(group.trajectories)} candidates; load {os.getloadavg()[0]:.1f}")
    runs = [("default budgets", Budgets())]
    if args.overrun is not None:
        runs.append((f"sandbox budget {args.overrun:g}s", Budgets(sandbox_seconds=args.overrun)))
    for name, budgets in runs:
        outcome = grade(group, budgets, args.transcripts / name.replace(" ", "-"), args.test_runs)
        print(f"== {name}: load {os.getloadavg()[0]:.1f}")
        print(json.dumps(outcome, indent=1))
        done = outcome["status"] == "graded"
        print(f"{'PASS' if done else 'FAIL'} {name}: {outcome['status']} {outcome['reason']}".rstrip())


if __name__ == "__main__":
    main()
