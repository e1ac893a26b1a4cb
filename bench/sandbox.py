"""Sandbox latency against bare baselines measured in the same run; prints ratios.

Docker: first-exec latency of a group (container start, trees loaded, one command) against
`docker run --rm IMAGE true`, and warm per-command latency against a bare `docker exec CONTAINER true`
(both through the same SDK the backend uses, plus the docker CLI for reference). Local: per-command latency
of each isolation level that works here against a bare subprocess. Target: warm docker ratio <= 1.5.

Run-shaped calls (Docker): one probe on base and four candidates, as the `run` tool sends it. Its targets
run one after another (each finds /tmp holding nothing of another's); the baselines, measured in turns with
it, are the same five commands run in parallel in the same container (the mechanism before, under which a
fixed /tmp name collided) and five bare `docker exec`s of the probe in the pristine trees, in parallel (no
isolation, no fresh copy).

Run: python bench/sandbox.py [--runs 40] [--groups 3] (needs the images: gagar images build).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from bench.args import parser_for  # noqa: E402
from grader.sandbox import open_sandbox  # noqa: E402
from grader.sandbox.base import DEFAULT_IMAGE  # noqa: E402
from tests.support.conftest_sandbox import _commit, _git, make_repo  # noqa: E402


def timed(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        out.append(time.perf_counter() - started)
    return out


def interleaved(fns: dict[str, Callable[[], object]], runs: int) -> dict[str, float]:
    """Median seconds of each, run in turns so that drift of the machine hits all alike."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            samples[name] += timed(fn, 1)
    return {name: statistics.median(values) for name, values in samples.items()}


def row(name: str, seconds: float, base: float | None = None) -> None:
    ratio = f"{seconds / base:6.2f}x" if base else "       "
    print(f"  {name:<54} {seconds * 1000:9.1f} ms {ratio}")


def bench_docker(trees: object, runs: int, groups: int) -> None:
    import docker

    client = docker.from_env()
    api = client.api
    print(f"docker ({DEFAULT_IMAGE}):")

    def first_exec() -> None:
        with open_sandbox(trees) as sb:  # type: ignore[arg-type]
            sb.exec("A", ["true"])

    def bare_run() -> None:
        client.containers.run(DEFAULT_IMAGE, ["true"], remove=True, network_mode="none")

    cold = interleaved({"sandbox": first_exec, "run": bare_run}, groups)
    row("bare docker run --rm IMAGE true (SDK)", cold["run"])
    row("open_sandbox + first exec + close", cold["sandbox"], cold["run"])

    with open_sandbox(trees) as sb:  # type: ignore[arg-type]
        cid = sb.container_id
        assert cid is not None

        def bare_exec() -> None:
            exec_id = api.exec_create(cid, ["true"])["Id"]
            api.exec_start(exec_id)
            api.exec_inspect(exec_id)

        def cli_exec() -> None:
            subprocess.run(["docker", "exec", cid, "true"], check=True)

        for _ in range(3):
            sb.exec("A", ["true"])
        warm = interleaved(
            {
                "bare": bare_exec,
                "cli": cli_exec,
                "exec": lambda: sb.exec("A", ["true"]),
                "pytest": lambda: sb.exec(
                    "base", ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"]
                ),
            },
            runs,
        )
        row("bare docker exec CONTAINER true (SDK)", warm["bare"])
        row("bare docker exec CONTAINER true (CLI)", warm["cli"], warm["bare"])
        row("sandbox.exec(target, ['true'])", warm["exec"], warm["bare"])
        row("sandbox.exec(base, pytest -q)", warm["pytest"], warm["bare"])
        ratio = warm["exec"] / warm["bare"]
        print(f"  warm exec overhead ratio vs bare docker exec: {ratio:.2f}x (target <= 1.5x)")
        print(f"  warm exec overhead ratio vs docker CLI exec:  {warm['exec'] / warm['cli']:.2f}x")


RUN_PROBES = {
    "import probe": "python3 -c 'import pkg; print(pkg.add(2, 3))'",
    "pytest -q": "python3 -m pytest -q -p no:cacheprovider",
}


def bench_run_calls(trees: object, runs: int) -> None:
    """Cost of one `run` call on five targets: one after another against two parallel baselines."""
    from concurrent.futures import ThreadPoolExecutor

    import docker

    api = docker.from_env().api
    targets = trees.targets()  # type: ignore[attr-defined]
    print(f"run-shaped calls ({len(targets)} targets: {', '.join(targets)}):")
    with open_sandbox(trees) as sb, ThreadPoolExecutor(len(targets)) as pool:  # type: ignore[arg-type]
        cid = sb.container_id
        for target in targets:
            sb.exec(target, ["true"])

        def bare(probe: str) -> None:
            def one(target: str) -> None:
                exec_id = api.exec_create(
                    cid,
                    ["sh", "-c", probe],
                    user="0:0",
                    workdir=sb._slot_of[target].sources[target],
                    environment={"PYTHONDONTWRITEBYTECODE": "1"},
                )["Id"]
                api.exec_start(exec_id)
                api.exec_inspect(exec_id)

            list(pool.map(one, targets))

        def parallel(probe: str) -> None:  # the mechanism before: every target at once in one container
            argv = ["sh", "-c", probe]
            list(pool.map(lambda t: sb._exec_alone(sb._slot_of[t], t, argv, 60.0, {}, setup=False), targets))

        for name, probe in RUN_PROBES.items():
            took = interleaved(
                {
                    "bare": lambda p=probe: bare(p),
                    "parallel": lambda p=probe: parallel(p),
                    "run": lambda p=probe: sb.exec_many(targets, p),
                },
                runs,
            )
            row(f"{name}: bare docker exec x{len(targets)}, parallel", took["bare"])
            row(f"{name}: sandbox, targets in parallel (before)", took["parallel"], took["bare"])
            row(f"{name}: run call, one after another (now)", took["run"], took["bare"])
            per_target = took["run"] / len(targets) * 1000
            print(
                f"  {name}: a run call costs {took['run'] * 1000:.0f} ms ({per_target:.0f} ms per target), "
                f"{took['run'] / took['parallel']:.2f}x the targets-in-parallel baseline"
            )


def with_candidates(trees: object, names: tuple[str, ...]) -> object:
    """`trees` with more candidate branches (one new file each) on top of its base."""
    repo = trees.repo  # type: ignore[attr-defined]
    for name in names:
        _git(repo, "checkout", "-q", "-b", name, "main")
        _commit(repo, {f"{name.lower()}_only.txt": f"{name}\n"}, name)
    _git(repo, "checkout", "-q", "main")
    trees.branches.update({name: name for name in names})  # type: ignore[attr-defined]
    return trees


def bench_local(trees: object, runs: int) -> None:
    from grader.sandbox import local

    print("local:")
    bare = statistics.median(timed(lambda: subprocess.run(["true"], check=True), runs))
    row("bare subprocess true", bare)
    for level in local.LEVELS:
        if local.available(level) is not None:
            print(f"  {level}: unavailable ({local.available(level)})")
            continue
        with open_sandbox(trees, backend="local", isolation=level) as sb:  # type: ignore[arg-type]
            seconds = statistics.median(timed(lambda sb=sb: sb.exec("A", ["true"]), runs))
        row(f"sandbox.exec(target, ['true']) [{level}]", seconds, bare)


def main() -> None:
    parser = parser_for(__doc__)
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--groups", type=int, default=3)
    parser.add_argument("--run-calls", type=int, default=10, help="repetitions of each run-shaped call")
    parser.add_argument("--skip-docker", action="store_true")
    parser.add_argument("--only-run-calls", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = make_repo(Path(tmp))
        if not args.skip_docker and not args.only_run_calls:
            bench_docker(trees, args.runs, args.groups)
        if not args.skip_docker:
            bench_run_calls(with_candidates(trees, ("C", "D")), args.run_calls)
        if not args.only_run_calls:
            bench_local(trees, args.runs)


if __name__ == "__main__":
    main()
