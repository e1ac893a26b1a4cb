"""SWE-bench instances in their own environments: the layer, the base tree's tests, and a `run` probe.

For each group of a SWE-bench import (`gagar import swebench`), with the instances file it came from:
1. the task's environment layer is built (or reused): cold build time and size, as `gagar env build` does;
2. in a sandbox on that layer, the base tree's package is imported and the task's `test_command` (the
   instance's test files, as they are at the base commit) is run by pytest: collected / passed / failed;
3. the LLM grader's `run` tool, driven by a scripted policy on a loopback OpenAI-compatible server
   (`grader.servers.scripted.ScriptedServer`), runs two probes on base and every passing candidate: `tests`,
   and the
   instance's FAIL_TO_PASS tests after applying its `test_patch` in each target's copy of the tree (the
   SWE-bench harness's check, made inside gagar's sandbox). The probe's per-target outcome is printed
   beside the harness's published resolved label.

Nothing here is committed data: pass the files of your own import.
Run: python bench/swebench_environments.py GROUPS INSTANCES [--group ID ...] [--retry]
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
from grader.sandbox import open_sandbox  # noqa: E402
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


def base_checks(group: Group, image: str) -> dict[str, str]:
    """Import the base tree's package and run the task's test command in a sandbox on `image`."""
    name = package_of(group)
    with (
        open_workspace(group) as ws,
        open_sandbox(ws, image=image, setup=group.task.setup, test_command=group.task.test_command) as sb,
    ):
        imported = sb.exec(
            "base", f"python -c 'import {name}, sys; print(sys.version.split()[0], {name}.__file__)'"
        )
        started = time.perf_counter()
        tests = sb.run_tests("base") if group.task.test_command else None
        seconds = time.perf_counter() - started
    return {
        "import": (
            imported.stdout.strip() if imported.exit_code == 0 else f"FAILED {imported.stderr[-300:]}"
        ),
        "tests": (
            f"exit {tests.exit_code}, {pytest_summary(tests.stdout)} ({seconds:.0f} s)"
            if tests is not None
            else "no test command (the test_patch only creates test files)"
        ),
    }


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


def main() -> None:
    parser = parser_for(__doc__)
    parser.add_argument("groups", type=Path)
    parser.add_argument("instances", type=Path)
    parser.add_argument("--group", action="append", help="only these group ids (repeatable)")
    parser.add_argument("--retry", action="store_true", help="build layers whose earlier build failed")
    parser.add_argument("--no-probe", action="store_true", help="skip the grader probe")
    args = parser.parse_args()
    instances = {
        row["instance_id"]: row for row in map(json.loads, args.instances.read_text().splitlines()) if row
    }
    groups = [complete_group(g) for g in load_group_file(args.groups)]
    if args.group:
        groups = [g for g in groups if g.group_id in set(args.group)]
    for group in groups:
        version = (group.task.environment or {}).get("version")
        print(f"\n### {group.group_id} (python {group.task.python}, version {version})")
        (outcome,) = prebuild([group], retry=args.retry)
        print("layer:", summary_line(outcome))
        if outcome.status == "failed":
            continue
        checks = base_checks(group, outcome.tag)
        print("base import:", checks["import"])
        print("base tests:", checks["tests"], "|", group.task.test_command)
        if args.no_probe:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            labels, runs = probe_through_grader(group, instances[group.group_id], Path(tmp))
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
