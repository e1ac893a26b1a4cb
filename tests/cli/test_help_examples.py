"""Every `example:` line of `gagar --help` and of every subcommand's `--help` runs as a user pastes it,
exits 0 and makes the files or prints the output it promises (issue 37.3, its Must show).

Each line runs through `sh` (so `~` and quoting are the shell's) as `gagar` on PATH (this checkout's), in a
folder holding a copy of the repository's examples/, with HOME at a fresh folder: `~/src` holds the local git
copies of the SWE-bench task and prediction repositories laid out OWNER/NAME (symlinks to
$GAGAR_TEST_SOURCES, default /work/sources), `~/.cache/gagar` is the data cache (mirrors and prepared
benchmarks: empty at first, so `bench prepare` really prepares), and the machine cache (the built inference
servers, the SWE-bench tables) stays the machine's. Each line runs in a network namespace of its own, so a
port an example names (8080, 8081, 8000) is free whoever else uses it on the machine, and nothing reaches
the internet: where a line needs an endpoint (`--base-url`), the scripted OpenAI-compatible server
(tests/support/example_endpoint.py) listens on that port in the same namespace; `gagar serve` lines are
stopped with Ctrl-C once their server answers. Data they need and no earlier example makes is made by a
fixture: SWE-bench files for `import`, three graded steps for `trend`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from grader.cli.examples import EXAMPLES
from grader.servers.llamacpp import BuildUnavailable, ensure_binary, ensure_model
from grader.servers.llamacpp_python import ensure_package
from grader.util.cachedirs import machine_cache
from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.docker]

SOURCES = Path(os.environ.get("GAGAR_TEST_SOURCES", "/work/sources"))
NETNS = ["unshare", "--net", "--"]
ORDER = [
    "",
    "grade",
    "show",
    "report",
    "diff",
    "workspace",
    "degrade",
    "eval",
    "reference",
    "reference consensus",
    "simulate",
    "trend",
    "import",
    "import swebench",
    "sandbox",
    "sandbox exec",
    "sandbox cleanup",
    "images",
    "images build",
    "env",
    "bench",
    "bench check",
    "bench prepare",
    "bench bundle",
    "env build",
    "distill",
    "serve",
]
"""The commands in the order their examples run: later ones use what earlier ones made (runs/example, a
prepared swebench-lite)."""


def example_lines(command: str) -> list[str]:
    """The command lines of a command's example, continuation lines joined as the shell joins them."""
    joined = EXAMPLES[command].replace("\\\n", " ")
    return [" ".join(line.split()) for line in joined.splitlines() if line.strip().startswith("gagar ")]


@dataclass
class Home:
    """The folders and environment the examples run in."""

    root: Path
    project: Path
    env: dict[str, str]
    ran: set[str] = field(default_factory=set)

    def path(self, text: str) -> Path:
        """A path as the example names it (`~` is HOME), from the project folder."""
        return self.project / Path(text.replace("~", str(self.root), 1) if text.startswith("~") else text)

    def run(self, line: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
        """Run one example line as a user would, in a network namespace of its own (with the endpoint it
        names, or probing and stopping the server it starts)."""
        python = shlex.quote(sys.executable)
        script = ["set -u", "ip link set lo up"]
        url = re.search(r"--base-url http://(?:127\.0\.0\.1|localhost):(\d+)/v1", line)
        if url:
            script += [
                f"{python} -m tests.support.example_endpoint {url.group(1)} > endpoint.log &",
                "endpoint=$!",
                f"{python} -m tests.support.wait_port {url.group(1)} 60 >/dev/null",
                line,
                "status=$?",
                "kill $endpoint",
                "exit $status",
            ]
        elif line.startswith("gagar serve"):
            port = re.search(r"--port (\d+)", line)
            script += [
                f"{line} > serve.out 2> serve.err &",
                "server=$!",
                f"{python} -m tests.support.wait_port {port.group(1) if port else 8080} 900 --models",
                "probe=$?",
                # The server answers a moment before `gagar serve` has seen it ready and said so: Ctrl-C once
                # it has (else the line the example promises may never be printed), waiting 60 s at most.
                "for _ in $(seq 300); do grep -q ' serving ' serve.out && break; sleep 0.2; done",
                "kill -INT $server",
                "wait $server",
                'status=$?; cat serve.out; cat serve.err >&2; [ "$probe" = 0 ] && exit $status || exit 9',
            ]
        else:
            script.append(line)
        return subprocess.run(
            [*NETNS, "sh", "-c", "\n".join(script)],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory, sandbox_images: None) -> Home:
    if subprocess.run([*NETNS, "true"], capture_output=True).returncode != 0:
        pytest.skip(
            "unshare --net is not permitted here: the examples' fixed ports need a namespace of their own"
        )
    root = tmp_path_factory.mktemp("home")
    project = root / "project"
    project.mkdir()
    shutil.copytree(REPO_ROOT / "examples", project / "examples")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "gagar"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -m grader.cli.commands "$@"\n')
    shim.chmod(0o755)
    if SOURCES.is_dir():
        for owner in SOURCES.iterdir():
            for name in owner.iterdir() if owner.is_dir() else []:
                (root / "src" / owner.name).mkdir(parents=True, exist_ok=True)
                (root / "src" / owner.name / name.name).symlink_to(name)
    env = {
        **os.environ,
        "HOME": str(root),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(REPO_ROOT),
        "GAGAR_CACHE": str(root / ".cache" / "gagar"),  # ~/.cache/gagar, as the examples name it
        "XDG_CACHE_HOME": str(machine_cache().parent),  # the built servers and tables stay the machine's
        "COLUMNS": "160",
    }
    return Home(root, project, env)


def _needs_sources(home: Home) -> None:
    if not (home.root / "src" / "astropy" / "astropy").exists():
        pytest.skip(f"no local copies of the SWE-bench repositories in {SOURCES} (GAGAR_TEST_SOURCES)")


def _needs_servers() -> None:
    """The servers `gagar serve` starts, built (or reused) here: inside the examples' namespace no download
    can happen."""
    try:
        ensure_binary(), ensure_package(), ensure_model()
    except BuildUnavailable as exc:
        pytest.skip(f"the inference servers cannot be built here: {exc}")


def _swebench_files(home: Home) -> None:
    """SWE-bench instances, predictions of two systems and their harness reports, for the import examples."""
    base = "2051e30b9b596e944524ccb787ed20f9f5be93e3"
    instance = {"instance_id": "pytest-dev__pytest-5227", "repo": "pytest-dev/pytest", "base_commit": base}
    patch = (
        "diff --git a/README.rst b/README.rst\n--- a/README.rst\n+++ b/README.rst\n@@ -1 +1,2 @@\n x\n+y\n"
    )
    files = {"instances.jsonl": instance}
    for system, resolved in (("preds", True), ("a", True), ("b", False)):
        files[f"{system}.jsonl"] = {
            "instance_id": instance["instance_id"],
            "model_name_or_path": f"system-{system}",
            "model_patch": patch,
        }
        report = "report.json" if system == "preds" else f"{system}_report.json"
        ids = [instance["instance_id"]]
        (home.project / report).write_text(json.dumps({"resolved_ids": ids if resolved else []}))
    for name, row in files.items():
        (home.project / name).write_text(json.dumps(row) + "\n")


def _trend_steps(home: Home) -> None:
    """Three training steps graded into runs/step-1..3, as examples/length_steps.py's docstring does it."""
    subprocess.run(
        [sys.executable, "examples/length_steps.py", "runs/length", "--steps", "3", "--rewarding-from", "2"],
        cwd=home.project,
        env=home.env,
        check=True,
        capture_output=True,
    )
    for step in (1, 2, 3):
        graded = home.run(f"gagar grade runs/length/step-{step}.jsonl --out runs/step-{step}")
        assert graded.returncode == 0, graded.stderr


SETUP: dict[str, Callable[[Home], None]] = {
    "import": _swebench_files,
    "import swebench": lambda home: (_needs_sources(home), _swebench_files(home)),
    "trend": _trend_steps,
    "bench prepare": _needs_sources,
    "bench bundle": _needs_sources,
    "serve": lambda home: _needs_servers(),
}
NEEDS = {"show": "", "report": "", "diff": "", "env build": "bench prepare", "distill": "bench prepare"}
"""A command whose examples read what another command's examples make."""


def _results(home: Home, run: str) -> list[dict]:
    return [json.loads(line) for line in (home.path(run) / "results.jsonl").read_text().splitlines()]


def _graded(home: Home, run: str, count: int = 1) -> None:
    results = _results(home, run)
    assert len(results) == count and all(r["status"] == "graded" for r in results), results


def _json_out(proc: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(proc.stdout)


PROMISES: dict[str, Callable[[Home, subprocess.CompletedProcess[str]], None]] = {
    "gagar grade examples/inventory_group.json --out runs/example": lambda h, p: (
        _graded(h, "runs/example"),
        _contains(p, "1 group: 1 graded, 0 skipped, 0 failed -> runs/example/results.jsonl"),
    ),
    "gagar show runs/example": lambda h, p: _contains(p, "inventory-average-empty"),
    "gagar report runs/example": lambda h, p: (
        _contains(p, "wrote runs/example/report.html"),
        _exists(h, "runs/example/report.html"),
    ),
    "gagar grade examples/inventory_group.json --out runs/llm --grader llm --model gemma-3-270m "
    "--base-url http://127.0.0.1:8080/v1": lambda h, p: (
        _graded(h, "runs/llm"),
        _exists(h, "runs/llm/transcripts"),
    ),
    "gagar workspace examples/inventory_group.json --dir runs/inventory-ws": lambda h, p: (
        _contains(p, "inspect with: git --git-dir"),
        _exists(h, "runs/inventory-ws"),
    ),
    "gagar import swebench --instances instances.jsonl --predictions preds.jsonl --results report.json "
    "-o groups.jsonl": lambda h, p: _contains(p, "wrote 1 groups to groups.jsonl"),
    "gagar import swebench --instances instances.jsonl --predictions a.jsonl b.jsonl --results "
    "a_report.json b_report.json --repo-root ~/src -o groups.jsonl": lambda h, p: (
        _contains(p, "wrote 1 groups to groups.jsonl"),
        _equal(
            json.loads(h.path("groups.jsonl").read_text())["task"]["repo"],
            str(h.path("~/src/pytest-dev/pytest")),
        ),
    ),
    "gagar sandbox exec examples/inventory_group.json clean -- python -m pytest -q": lambda h, p: (
        _equal(_json_out(p)["exit_code"], 0),
        _contains(p, "passed"),
    ),
    "gagar sandbox exec examples/inventory_group.json base --backend local 'ls -la'": lambda h, p: (
        _contains(p, "inventory"),
        _equal(_json_out(p)["exit_code"], 0),
    ),
    "gagar sandbox cleanup": lambda h, p: _contains(p, "removed", err=True),
    "gagar images build": lambda h, p: _contains(p, "gagar/python"),
    "gagar images build --offline": lambda h, p: _contains(p, "gagar/minimal"),
    "gagar env build examples/inventory_group.json": lambda h, p: _contains(p, "1 group(s) need no layer"),
    "gagar env build ~/.cache/gagar/benchmarks/swebench-lite/verification/groups/verification.jsonl --group "
    "pytest-dev__pytest-7373 --timeout 1800": lambda h, p: _contains(p, "1 layer(s) for 1 group(s)"),
    "gagar eval --bench examples/benchmark-tiny --out runs/eval": lambda h, p: (
        _exists(h, "runs/eval/eval.json"),
        _contains(p, "time: "),
    ),
    "gagar eval examples/degraded/groups.jsonl --reference examples/degraded/reference.json --out "
    "runs/eval-degraded --consistency 3": lambda h, p: (
        _equal(json.loads(h.path("runs/eval-degraded/eval.json").read_text())["consistency"]["k"], 3),
        _contains(p, "0.967"),
    ),
    "gagar bench check examples/benchmark-tiny": lambda h, p: _contains(p, "probes (docker sandbox)"),
    "gagar bench check examples/benchmark-tiny --no-probes": lambda h, p: _contains(
        p, "benchmark inventory-tiny"
    ),
    "gagar bench prepare swebench-lite --list-sources": lambda h, p: _contains(p, "astropy/astropy"),
    "gagar bench prepare swebench-lite --source-root ~/src": lambda h, p: (
        _contains(p, "prepared swebench-lite in "),
        _exists(h, "~/.cache/gagar/benchmarks/swebench-lite/preference/benchmark.json"),
    ),
    "gagar bench prepare swebench-lite-large --source-root ~/src --partial": lambda h, p: (
        _contains(p, "prepared swebench-lite-large in "),
        _contains(p, "instances left out: their task repository is not here"),
    ),
    "gagar bench bundle ~/src/pytest-dev/pytest 2051e30b9b596e944524ccb787ed20f9f5be93e3 --repository "
    "pytest-dev/pytest --out bundles/pytest-5227.bundle": lambda h, p: (
        _exists(h, "bundles/pytest-5227.bundle"),
        _equal(_json_out(p)["bundles/pytest-5227.bundle"]["repository"], "pytest-dev/pytest"),
    ),
    "gagar serve": lambda h, p: (
        _contains(p, "llama.cpp serving gemma-3-270m at http://127.0.0.1:8080/v1"),
        _contains(p, "models: gemma-3-270m"),
    ),
    "gagar serve --server llama-cpp-python --port 8081 --threads 2": lambda h, p: (
        _contains(p, "llama-cpp-python serving gemma-3-270m at http://127.0.0.1:8081/v1"),
        _contains(p, "models: gemma-3-270m"),
        _contains(p, "starting llama-cpp-python on port 8081, 2 thread(s)", err=True),
    ),
    "gagar reference consensus examples/degraded/groups.jsonl --k 5 "
    "--out runs/references.jsonl": lambda h, p: (
        _exists(h, "runs/references.jsonl"),
        _contains(p, "5/5 gradings"),
    ),
    "gagar reference consensus examples/degraded/groups.jsonl --k 5 --threshold 0.8 --out "
    "runs/references.jsonl": lambda h, p: _contains(p, "pairs agreed by at least 0.8"),
    "gagar degrade examples/inventory_group.json --clean clean --out degraded/": lambda h, p: (
        _contains(p, "wrote 7 variants of 1 group to degraded"),
        _exists(h, "degraded/reference.json"),
    ),
    "gagar show runs/example inventory-average-empty --full": lambda h, p: _contains(p, "Ranking"),
    "gagar report runs/example -o report.html": lambda h, p: _exists(h, "report.html"),
    "gagar trend runs/step-1 runs/step-2 runs/step-3 --window 3": lambda h, p: _contains(p, "step-3"),
    "gagar diff runs/example inventory-average-empty clean leftover-script": lambda h, p: _contains(
        p, "reproduce.py"
    ),
    "gagar simulate --out runs/simulation --steps 200 --seeds 3": lambda h, p: (
        _exists(h, "runs/simulation/table.txt"),
        _exists(h, "runs/simulation/simulation.json"),
    ),
    "gagar distill examples/degraded/groups.jsonl --reference examples/degraded/reference.json "
    "--out runs/sft --model teacher --base-url http://localhost:8000/v1": lambda h, p: (
        _exists(h, "runs/sft/manifest.json"),
        _contains(p, "transcripts from 1 groups"),
    ),
    "gagar distill ~/.cache/gagar/benchmarks/swebench-lite/preference/groups/preference.jsonl --reference "
    "~/.cache/gagar/benchmarks/swebench-lite/preference/references.dev.jsonl --out sft-dev/ --model teacher "
    "--base-url http://localhost:8000/v1": lambda h, p: (
        _exists(h, "sft-dev/manifest.json"),
        _contains(p, "transcripts from 5 groups"),
    ),
}
"""What each example line promises, checked after it exits 0."""


def _contains(proc: subprocess.CompletedProcess[str], text: str, err: bool = False) -> None:
    shown = " ".join((proc.stderr if err else proc.stdout).split())
    assert " ".join(text.split()) in shown, (text, proc.stdout[-3000:], proc.stderr[-3000:])


def _exists(home: Home, path: str) -> None:
    assert home.path(path).exists(), path


def _equal(value: object, expected: object) -> None:
    assert value == expected, (value, expected)


def test_every_example_is_run_here_and_promises_something() -> None:
    assert sorted(ORDER) == sorted(EXAMPLES), "give the new command its place in ORDER"
    lines = [line for command in EXAMPLES for line in example_lines(command)]
    assert set(lines) - set(PROMISES) == set(), "say what these examples promise"


def _run_command(home: Home, command: str) -> None:
    if command in home.ran:
        return
    if command in NEEDS:
        _run_command(home, NEEDS[command])
    if command in SETUP:
        SETUP[command](home)
    for line in example_lines(command):
        proc = home.run(line)
        assert proc.returncode == 0, (
            f"{line}\nexit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
        PROMISES[line](home, proc)
    home.ran.add(command)


@pytest.mark.parametrize("command", ORDER, ids=lambda name: name.replace(" ", "-") or "gagar")
def test_the_example_runs_and_makes_what_it_promises(home: Home, command: str) -> None:
    _run_command(home, command)
