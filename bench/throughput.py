"""Grading throughput against a model of fixed latency: in-process and through Ray, at several concurrencies.

A scripted OpenAI-compatible server answers every request after `--latency` seconds; each group takes
`--turns` requests (list, then submit). The ideal rate at concurrency c is c / (turns x latency) groups per
second; the bench prints the measured rate and its ratio to that ideal, measured in this run.

    python bench/throughput.py                  # 64 groups at 1, 8, 32; in-process and Ray (about 20 min)
    python bench/throughput.py --quick          # 16 groups at 1 and 8, in-process only
    python bench/throughput.py --latency 0.5 --concurrency 32   # where the workspace builds start to show

At 32 in flight it also grades through Ray with `NoopActor`s (no workspace, no grader: each group only waits
the model's time), the rate Ray alone allows; the real grading through Ray is compared with it, in the same
run. It first prints the CPU one group costs and the processes it starts (16 groups at once), figures that
other load on the machine barely moves.

Targets at 32 in flight: in-process at least 0.9 of ideal; through Ray at least 0.9 of the no-op rate.
"""

from __future__ import annotations

import multiprocessing
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.args import parser_for  # noqa: E402
from grader.graders.llm.agent import Budgets, LLMGrader  # noqa: E402
from grader.groups.formats import load_group_file  # noqa: E402
from grader.groups.models import Group  # noqa: E402
from grader.groups.outcomes import Outcome  # noqa: E402
from grader.pipeline import GradingOptions, grade_groups, passthrough  # noqa: E402
from grader.servers.scripted import ScriptedServer, labels_in, tool_calls  # noqa: E402
from grader.util.concurrency import Concurrency  # noqa: E402

TARGET = 0.9
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


class NoopActor:
    """A Ray actor that grades nothing: it waits as long as the model would (turns x latency) and passes the
    group through. Its rate is what Ray alone allows, the baseline the real grading through Ray is held to."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def grade(self, group_data: dict) -> dict:
        group = Group.model_validate(group_data)  # the same (de)serialization as the grading actor
        time.sleep(self.seconds)
        return passthrough(group, "noop", "", Outcome.GRADED).model_dump(mode="json")

    def ping(self) -> bool:
        return True


def ray_grader(url: str, concurrency: int, noop_seconds: float | None = None):
    """A RayGrader with the scripted LLM grader, or (`noop_seconds`) with `NoopActor`s in the same layout."""
    import ray

    from grader.integrations.ray import RayGrader

    class NoopRayGrader(RayGrader):
        def _spawn(self):  # the same dispatch, streaming and actor options; only the actor differs
            actor = ray.remote(NoopActor).options(max_concurrency=self.per_actor, num_cpus=0)
            return actor.remote(noop_seconds)

    actors = min(concurrency, 4)
    return (RayGrader if noop_seconds is None else NoopRayGrader)(
        grader_name="llm",
        grader_options={"model": "scripted", "base_url": url, "sandbox": None, "budgets": Budgets(retries=0)},
        actors=actors,
        per_actor=max(1, concurrency // actors),
    )


def run_ray(url: str, batch: list[Group], concurrency: int, noop_seconds: float | None = None) -> float:
    grader = ray_grader(url, concurrency, noop_seconds)
    grader.grade(batch[: len(grader._actors)])  # actors started and warm, outside the timing
    start = time.perf_counter()
    results = grader.grade(batch)
    elapsed = time.perf_counter() - start
    grader.shutdown()
    failed = [r.reason for r in results if r.status != "graded"]
    if failed:
        raise SystemExit(f"{len(failed)} groups failed through Ray, e.g. {failed[0]}")
    return elapsed


def per_group_cost(url: str, batch: list[Group]) -> tuple[float, float, float]:
    """(CPU ms of this process, CPU ms of its child processes, child processes started) per group graded.

    Load-independent where the ratios are not: other work on the machine slows a run, not its count of
    processes, and only a little its CPU time.
    """
    started = [0]
    spawn = subprocess.Popen.__init__

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        started[0] += 1
        spawn(self, *args, **kwargs)

    before = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.Popen.__init__ = counting  # type: ignore[method-assign]
    try:
        run_in_process(url, batch, len(batch))
    finally:
        subprocess.Popen.__init__ = spawn  # type: ignore[method-assign]
    after = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    pairs = zip(after, before, strict=True)
    own, children = (a.ru_utime + a.ru_stime - b.ru_utime - b.ru_stime for a, b in pairs)
    return own * 1000 / len(batch), children * 1000 / len(batch), started[0] / len(batch)


def main() -> None:
    parser = parser_for(__doc__)
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--turns", type=int, default=4)
    # 2 s is a fast grading turn for a 30B-class model over a 10-30k token context; at 0.5 s on 2 cores the
    # cost of building 32 workspaces at once shows (see bench/README.md for figures).
    parser.add_argument("--latency", type=float, default=2.0, help="seconds per model request")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeat", type=int, default=1, help="measure every row this many times")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--quick", action="store_true", help="16 groups at 1 and 8, in-process only")
    args = parser.parse_args()
    if args.quick:
        args.groups, args.concurrency, args.no_ray, args.latency = 16, [1, 8], True, 0.5
    batch = groups(args.groups)
    process, url = start_server(args.turns, args.latency)
    model_seconds = args.turns * args.latency
    try:
        grade_groups(batch[:2], LLMGrader("scripted", base_url=url, sandbox=None))  # warm the mirror
        own, children, processes = per_group_cost(url, batch[:16])
        print(
            f"per group: {own + children:.1f} ms CPU ({own:.1f} ms in this process, {children:.1f} ms in "
            f"{processes:.1f} child processes)"
        )
        print(f"{args.groups} groups, {args.turns} turns x {args.latency:g}s per group")
        header = f"{'mode':<11} {'conc':>4} {'seconds':>8} {'groups/s':>9} {'ideal':>7} {'ratio':>6}"
        print(f"{header} {'/noop':>6}")
        rates: dict[tuple[str, int], list[float]] = {}

        def measure(modes: list[tuple[str, Callable[[str, list[Group], int], float]]]) -> None:
            for _ in range(args.repeat):
                for name, run in modes:
                    for c in args.concurrency:
                        elapsed = run(url, batch, c)
                        rate = args.groups / elapsed
                        ideal = min(c, args.groups) / model_seconds
                        rates.setdefault((name, c), []).append(rate)
                        noop = rates.get(("ray-noop", c), [None])[-1] if name == "ray" else None
                        versus = f"{rate / noop:>6.2f}" if noop else f"{'':>6}"
                        print(
                            f"{name:<11} {c:>4} {elapsed:>8.2f} {rate:>9.2f} {ideal:>7.2f} "
                            f"{rate / ideal:>6.2f} {versus}"
                        )

        # In-process rows first, before Ray exists: its idle daemons (raylet, GCS, workers) take CPU from
        # whatever else the process does, which is not what the in-process rows measure.
        measure([("in-process", run_in_process)])
        if not args.no_ray:
            # Ray's own processes take seconds of CPU to start: started and settled before anything is timed.
            run_ray(url, batch[:8], 8, noop_seconds=0.1)
            time.sleep(5)
            measure(
                [
                    ("ray-noop", lambda u, b, c: run_ray(u, b, c, noop_seconds=model_seconds)),
                    ("ray", run_ray),
                ]
            )
    finally:
        process.terminate()
    for c in args.concurrency:
        if c != 32:
            continue
        ideal = c / model_seconds
        checks = [("in-process", "ideal", [r / ideal for r in rates[("in-process", c)]])]
        if ("ray", c) in rates:
            pairs = zip(rates[("ray", c)], rates[("ray-noop", c)], strict=True)
            checks.append(("ray", "ray-noop", [r / n for r, n in pairs]))
        for name, base, ratios in checks:
            shown = ", ".join(f"{r:.2f}" for r in ratios)
            verdict = "PASS" if min(ratios) >= TARGET else "FAIL"
            print(f"target {name} at 32: {name}/{base} {shown} >= {TARGET}: {verdict}")


if __name__ == "__main__":
    main()
