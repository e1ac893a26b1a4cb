"""Grading throughput against a model of fixed latency: in-process and through Ray, at several concurrencies.

A scripted OpenAI-compatible server answers every request after `--latency` seconds; each group takes
`--turns` requests (list, then submit). The ideal rate at concurrency c is c / (turns x latency) groups per
second; the bench prints the measured rate and its ratio to that ideal, measured in this run.

    python bench/throughput.py                  # 64 groups at 1, 8, 32; in-process and Ray (about 20 min)
    python bench/throughput.py --quick          # 16 groups at 1 and 8, in-process only
    python bench/throughput.py --latency 0.5 --concurrency 32   # where the workspace builds start to show

Targets: at least 0.8 of ideal at 32 in-process, 0.7 through Ray.
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.concurrency import Concurrency  # noqa: E402
from grader.formats import load_group_file  # noqa: E402
from grader.graders.llm import Budgets, LLMGrader  # noqa: E402
from grader.models import Group  # noqa: E402
from grader.pipeline import GradingOptions, grade_groups  # noqa: E402
from grader.testing import ScriptedServer, labels_in, tool_calls  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "inventory_group.json"


class FixedTurns:
    """Lists the candidates for turns - 1 requests, then submits; every reply after `latency` seconds."""

    def __init__(self, turns: int, latency: float) -> None:
        self.turns, self.latency = turns, latency

    def __call__(self, request: dict, n: int):
        step = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if step + 1 < self.turns:
            return tool_calls(("list_candidates", {}), delay=self.latency)
        labels = labels_in(request)
        ranking = {"ranking": [[label] for label in labels], "reasons": {}, "confidence": 1.0}
        return tool_calls(("submit_ranking", ranking), delay=self.latency)


def serve(turns: int, latency: float, port: int) -> None:
    """Run the scripted model in its own process, as a real endpoint would be: it must not share our GIL."""
    with ScriptedServer(FixedTurns(turns, latency), port=port):
        while True:
            time.sleep(3600)


def start_server(turns: int, latency: float) -> tuple[multiprocessing.Process, str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = multiprocessing.Process(target=serve, args=(turns, latency, port), daemon=True)
    process.start()
    for _ in range(100):
        with socket.socket() as client:
            if client.connect_ex(("127.0.0.1", port)) == 0:
                return process, f"http://127.0.0.1:{port}/v1"
        time.sleep(0.05)
    raise SystemExit("the scripted server did not start")


def groups(n: int) -> list[Group]:
    (group,) = load_group_file(EXAMPLE)
    return [group.model_copy(update={"group_id": f"bench-{i}"}) for i in range(n)]


def run_in_process(url: str, batch: list[Group], concurrency: int) -> float:
    bounds = Concurrency(llm_calls=concurrency)
    grader = LLMGrader("scripted", base_url=url, sandbox=None, budgets=Budgets(retries=0))
    start = time.perf_counter()
    results = grade_groups(batch, grader, GradingOptions(concurrency=bounds), workers=concurrency)
    elapsed = time.perf_counter() - start
    failed = [r.reason for r in results if r.status != "graded"]
    if failed:
        raise SystemExit(f"{len(failed)} groups failed, e.g. {failed[0]}")
    return elapsed


def run_ray(url: str, batch: list[Group], concurrency: int) -> float:
    from grader.integrations.ray import RayGrader

    actors = min(concurrency, 4)
    grader = RayGrader(
        grader_name="llm",
        grader_options={"model": "scripted", "base_url": url, "sandbox": None, "budgets": Budgets(retries=0)},
        actors=actors,
        per_actor=max(1, concurrency // actors),
    )
    grader.grade(batch[:actors])  # actors started and warm, outside the timing
    start = time.perf_counter()
    results = grader.grade(batch)
    elapsed = time.perf_counter() - start
    grader.shutdown()
    failed = [r.reason for r in results if r.status != "graded"]
    if failed:
        raise SystemExit(f"{len(failed)} groups failed through Ray, e.g. {failed[0]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--turns", type=int, default=4)
    # 2 s is a fast grading turn for a 30B-class model over a 10-30k token context; at lower latencies on
    # 2 cores the CPU burst of building 32 workspaces at once shows (see bench/README.md for figures).
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per model request")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--quick", action="store_true", help="16 groups at 1 and 8, in-process only")
    args = parser.parse_args()
    if args.quick:
        args.groups, args.concurrency, args.no_ray, args.latency = 16, [1, 8], True, 0.5
    batch = groups(args.groups)
    process, url = start_server(args.turns, args.latency)
    try:
        grade_groups(batch[:2], LLMGrader("scripted", base_url=url, sandbox=None))  # warm the mirror
        modes = [("in-process", run_in_process)] + ([] if args.no_ray else [("ray", run_ray)])
        print(f"{args.groups} groups, {args.turns} turns x {args.latency:g}s per group")
        print(f"{'mode':<11} {'conc':>4} {'seconds':>8} {'groups/s':>9} {'ideal':>7} {'ratio':>6}")
        rows = []
        for name, run in modes:
            for c in args.concurrency:
                elapsed = run(url, batch, c)
                rate = args.groups / elapsed
                ideal = min(c, args.groups) / (args.turns * args.latency)
                rows.append((name, c, rate / ideal))
                print(f"{name:<11} {c:>4} {elapsed:>8.2f} {rate:>9.2f} {ideal:>7.2f} {rate / ideal:>6.2f}")
    finally:
        process.terminate()
    for name, c, ratio in rows:
        target = {"in-process": 0.8, "ray": 0.7}[name] if c == 32 else None
        if target is not None:
            print(
                f"target {name} at 32: ratio {ratio:.2f} >= {target}: {'PASS' if ratio >= target else 'FAIL'}"
            )


if __name__ == "__main__":
    main()
