"""SWE-bench instances in their own environments: the layer, the base tree's tests, and a `run` probe.

For each group of a SWE-bench import (`gagar import swebench`, or a prepared benchmark's groups.jsonl):
1. the task's environment layer is built (or reused), each distinct layer once, serially, as `gagar env
   build` does (builds are CPU-heavy: one at a time on a small machine), with its build time;
2. in a sandbox on that layer, opened as the grader's `run` opens it (`open_task_sandbox`: the layer's own
   setup, then the task's), the base tree's package is imported and the task's `test_command` (the
   instance's test files as they are at the base commit) is run: passed, failed with a count, or an error;
3. with `--instances` (the SWE-bench instances file), the LLM grader's `run` tool, driven by a scripted
   policy on a loopback OpenAI-compatible server (`grader.servers.scripted.ScriptedServer`), runs two probes
   on base and every passing candidate: `tests`, and the instance's FAIL_TO_PASS tests after applying its
   `test_patch` in each target's copy of the tree (the SWE-bench harness's check, made inside gagar's
   sandbox). The probe's per-target outcome is printed beside the harness's published resolved label.

`--table FILE` writes the docs' table (instance, layer, build seconds, test seconds, result), then the layers
with their build times and the total. Each group id is taken once, from the first file that has it.
Nothing here is committed data: pass the files of your own import or preparation.
Run: python bench/swebench_environments.py GROUPS [GROUPS ...] [--instances FILE] [--group ID ...]
     [--table FILE] [--retry] [--test-timeout S]
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]

from bench.args import parser_for  # noqa: E402
from grader.graders.llm.agent import Budgets, LLMGrader  # noqa: E402
from grader.graders.transcript import read_transcript  # noqa: E402
from grader.groups.formats import load_group_file  # noqa: E402
from grader.groups.models import Group, complete_group  # noqa: E402
from grader.pipeline import GradingOptions, grade_group_sync  # noqa: E402
from grader.sandbox.environments import spec_for_task  # noqa: E402
from grader.sandbox.prebuild import prebuild, summary_line  # noqa: E402
from grader.servers.scripted import ScriptedServer, labels_in, tool_calls  # noqa: E402
from grader.workspace.workspace import open_workspace  # noqa: E402

SUMMARY = re.compile(
    r"=+ (.*?(?:passed|failed|error|skipped|xfailed|deselected|no tests ran).*?)"
    r" in [\d.]+ ?s(?:econds)?\b"
)


def pytest_summary(text: str) -> str:
    """The last pytest summary ("1 failed, 90 passed") in `text`, with its collected count when printed."""
    found = SUMMARY.findall(text)
    # The first "collected": pytest's own test suite prints inner sessions' counts after it.
    collected = re.search(r"collected (\d+) items?", text)
    summary = found[-1] if found else "no pytest summary"
    return f"collected {collected.group(1)}: {summary}" if collected else summary


def package_of(group: Group) -> str:
    """The importable package of the task's repository (its name, e.g. "pytest", "seaborn")."""
    return group.task.repo.rstrip("/").split("__")[-1].split("/")[-1].removesuffix(".git")


def fail_to_pass_probe(instance: dict[str, Any]) -> str:
    """A shell command: apply the instance's test_patch in the tree, then run its FAIL_TO_PASS tests."""
    tests = json.loads(instance["FAIL_TO_PASS"])
    ids = " ".join(shlex.quote(t) for t in tests)
    return (
        "patch -p1 -s --no-backup-if-mismatch <<'GAGAR_TEST_PATCH'\n"
        f"{instance['test_patch']}\nGAGAR_TEST_PATCH\n"
        f"python -m pytest -rA -p no:cacheprovider {ids}"
    )


def probe_through_grader(group: Group, instance: dict[str, Any], workdir: Path) -> tuple[dict, list[str]]:
    """Grade `group` with a scripted policy running `tests` and the FAIL_TO_PASS probe; labels and outputs."""
    probes = (["tests"] if group.task.test_command else []) + [fail_to_pass_probe(instance)]

    def policy(request: dict[str, Any], _n: int):
        labels = labels_in(request)
        step = sum(1 for m in request["messages"] if m["role"] == "assistant")
        if step < len(probes):
            return tool_calls(("run", {"command": probes[step], "timeout": 600}))
        reasons = {label: "scripted probe" for label in labels}
        ranking = [[label] for label in labels]
        return tool_calls(("submit_ranking", {"ranking": ranking, "reasons": reasons, "confidence": 0.5}))

    budgets = Budgets(request_timeout=3600, retries=1, turns=6, retry_wait_initial=0.01, retry_wait_max=0.05)
    with ScriptedServer(policy) as server:
        grader = LLMGrader(
            "scripted", base_url=server.url, transcript_dir=workdir, seed=1, sandbox="docker", budgets=budgets
        )
        # Groups every system resolved are graded too: the probe is the point here, not the sampling.
        result = grade_group_sync(group, grader, GradingOptions(grade_all_pass=True))
    if result.transcript is None:
        raise RuntimeError(f"{group.group_id}: not graded ({result.status}: {result.reason})")
    events = read_transcript(result.transcript)
    start = next(e for e in events if e["type"] == "start")
    runs = [e["content"] for e in events if e["type"] == "tool_result" and e["name"] == "run"]
    return start["labels"], runs


def per_target(run_output: str) -> dict[str, str]:
    """`run` output split into target label -> "exit N, <pytest summary>"."""
    blocks = re.split(r"^== ", run_output, flags=re.M)
    out = {}
    for block in blocks[1:]:
        head, _, body = block.partition("\n")
        label, _, status = head.partition(": ")
        out[label] = f"{status.split(',')[0]}, {pytest_summary(body)}"
    return out


FINISHED = re.compile(r"tests finished: (.*?), in [\d.]+ seconds")


def test_result(exit_code: int, output: str) -> str:
    """The docs' result column for a test run: "passed (N)", "failed: K of N" or "error: ...".

    Reads pytest's summary line or sympy's `bin/test` one ("tests finished: 40 passed, 1 failed, ...").

    Args:
        exit_code: the test command's exit code.
        output: its stdout and stderr.

    Returns:
        One short cell.
    """
    pytest_found = SUMMARY.findall(output)
    sympy_found = FINISHED.findall(output)
    summary = (sympy_found or pytest_found or [""])[-1]
    counts = {
        word: int(n)
        for n, word in re.findall(
            r"(\d+) (passed|failed|errors?|exceptions?|skipped|xfailed|xpassed)", summary
        )
    }
    # sympy's bin/test counts an error raised in a test (not an assertion) as an exception.
    failed = sum(counts.get(word, 0) for word in ("failed", "error", "errors", "exception", "exceptions"))
    total = sum(counts.values())
    if exit_code == 0 and summary:
        return f"passed ({summary})"
    if failed:
        return f"failed: {failed} of {total} ({summary})"
    last = [line for line in output.strip().splitlines() if line.strip()][-1:] or [
        "no output"
    ]  # stderr's last
    return f"error: exit {exit_code}, {last[0][:160]}"


def table_row(group: Group, timeout: float) -> tuple[str, str, str]:
    """Run the task's test command on base in its layer, as `run` would; (test seconds, result, import)."""
    from grader.sandbox import Limits
    from grader.sandbox.environments import open_task_sandbox

    if not group.task.test_command:
        return "-", "no test command: the instance's test patch only creates test files", ""
    limits = Limits(timeout=timeout, lifetime=timeout + 600)
    with open_workspace(group) as ws, open_task_sandbox(ws, "docker", limits) as sb:
        name = package_of(group)
        imported = sb.exec("base", f"python -c 'import {name}, sys; print(sys.version.split()[0])'")
        started = time.perf_counter()
        tests = sb.run_tests("base")
        seconds = time.perf_counter() - started
    result = test_result(tests.exit_code, tests.stdout + "\n" + tests.stderr)
    if tests.timed_out:
        result = f"error: the test command took longer than {timeout:g} s"
    python = imported.stdout.strip() if imported.exit_code == 0 else "import failed"
    return f"{seconds:.0f}", result, python


def write_table(path: Path, rows: list[list[str]], outcomes: list[Any], total: float) -> None:
    """The markdown table of `--table`: one row per instance, then the layers and the total build time."""
    lines = [
        "| instance | layer | build s | test s | Python | result on base |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    lines += ["", "| layer | status | build s | size | groups |", "| --- | --- | --- | --- | --- |"]
    for outcome in outcomes:
        size = f"{outcome.size_bytes / 1e6:.0f} MB" if outcome.size_bytes else "-"
        name = outcome.tag.split(":", 1)[-1] or outcome.spec.slug
        status = outcome.status if outcome.status != "failed" else f"failed: {outcome.detail[:200]}"
        lines.append(f"| {name} | {status} | {outcome.seconds:.0f} | {size} | {len(outcome.groups)} |")
    lines += ["", f"Total build time: {total:.0f} s for {len(outcomes)} layers."]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = parser_for(__doc__)
    parser.add_argument("groups", type=Path, nargs="+")
    parser.add_argument("--instances", type=Path, help="SWE-bench instances: probe FAIL_TO_PASS via run")
    parser.add_argument("--group", action="append", help="only these group ids (repeatable)")
    parser.add_argument("--retry", action="store_true", help="build layers whose earlier build failed")
    parser.add_argument("--table", type=Path, help="write the table of layers and base test runs here")
    parser.add_argument("--test-timeout", type=float, default=1200, help="seconds a base test run may take")
    args = parser.parse_args()
    instances = {}
    if args.instances:
        rows = map(json.loads, args.instances.read_text().splitlines())
        instances = {row["instance_id"]: row for row in rows if row}
    groups: dict[str, Group] = {}
    for path in args.groups:
        for group in load_group_file(path):
            if group.group_id not in groups and (not args.group or group.group_id in set(args.group)):
                groups[group.group_id] = complete_group(group)
    # Each distinct layer once, serially (the first group that needs it builds it), then its groups' tests:
    # the table grows a layer at a time, so a run cut short still has every row it got to.
    layers: dict[Any, list[Group]] = {}
    for group in groups.values():
        spec = spec_for_task(group.task.repo, group.task.python, group.task.environment)
        layers.setdefault(spec, []).append(group)
    outcomes, table, total = [], [], 0.0
    for members in layers.values():
        started = time.perf_counter()
        (outcome,) = prebuild(members, retry=args.retry)
        total += time.perf_counter() - started
        outcomes.append(outcome)
        print("layer:", summary_line(outcome), flush=True)
        for group in members:
            first = outcome.groups[0] == group.group_id
            build = f"{outcome.seconds:.0f}" if first and outcome.status == "built" else outcome.status
            layer = outcome.tag.split(":", 1)[-1] or outcome.spec.slug
            if outcome.status == "failed":
                row = [
                    group.group_id,
                    layer,
                    "failed",
                    "-",
                    "-",
                    f"error: the layer did not build: {outcome.detail}",
                ]
            else:
                seconds, result, python = table_row(group, args.test_timeout)
                row = [group.group_id, layer, build, seconds, python, result]
            table.append(row)
            print(" | ".join(row), flush=True)
            if args.instances and outcome.status != "failed":
                probe(group, instances[group.group_id])
            if args.table:
                write_table(args.table, table, outcomes, total)


def probe(group: Group, instance: dict[str, Any]) -> None:
    """Print the `tests` and FAIL_TO_PASS probes through the grader's `run`, per target."""
    with tempfile.TemporaryDirectory() as tmp:
        labels, runs = probe_through_grader(group, instance, Path(tmp))
    passed = {t.id for t in group.trajectories if t.passed}
    names = (["tests"] if group.task.test_command else []) + ["FAIL_TO_PASS"]
    for name, output in zip(names, runs, strict=False):
        print(f"run {name!r}:")
        if output.startswith("[environment") or "all targets" in output.splitlines()[-1]:
            print("   ", output.splitlines()[-1][:300])
        for label, status in per_target(output).items():
            # A label stands for one patch; identical patches of several systems share it.
            tids = labels.get(label, [label])
            tids = [tids] if isinstance(tids, str) else tids
            harness = ", ".join("resolved" if t in passed else "not resolved" for t in tids)
            mark = "" if label == "base" else f"  [harness: {harness}]"
            print(f"    {label:5} {'+'.join(tids):36} {status}{mark}")


if __name__ == "__main__":
    main()
