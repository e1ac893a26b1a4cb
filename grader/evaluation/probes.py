"""Running a benchmark's probes: each on its pair's two patches, in the task's sandbox environment.

A probe is a script committed with the benchmark that tells a correctness or behaviour pair apart by
running: it must pass (exit 0) on the better patch's tree and fail on the worse one's. `run_probes` runs
every probe of a benchmark that way, in the same sandbox a grader's `run` tool would use (the task's image
or environment layer, its setup), so a probe result says what the grader could have found out. The script
travels in the command's environment and is written to a private temporary folder: the trees stay pristine.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from grader.errors import GagarError
from grader.evaluation.benchmark import Benchmark, Probe
from grader.sandbox.base import ExecResult, Limits, Sandbox
from grader.sandbox.environments import open_task_sandbox
from grader.workspace.workspace import open_workspace

STARTED = "gagar-probe: started"
"""Written to stderr just before the probe runs: a failure without it is the harness's, not the probe's."""


@dataclass(frozen=True)
class ProbeResult:
    """What one probe did on its pair: it holds when it passed on the better and failed on the worse."""

    probe: Probe
    better: ExecResult | None
    worse: ExecResult | None
    error: str = ""
    """Why the probe could not run at all (a patch that does not apply, no sandbox), else empty."""

    @property
    def holds(self) -> bool:
        """Ran on both sides, passed on the better patch and failed on the worse one."""
        sides = (self.better, self.worse)
        if any(side is None or not started(side) or side.timed_out for side in sides):
            return (
                False  # the harness failed, or a side ran out of time: that tells the pair apart by nothing
            )
        return self.better.exit_code == 0 and self.worse.exit_code != 0  # type: ignore[union-attr]

    def summary(self) -> str:
        """One line: the pair and each side's exit status.

        Returns:
            "better: pass (exit 0); worse: fail (exit 1)" or the error.
        """
        if self.error:
            return f"not run: {self.error}"
        sides = []
        for name, result in (("better", self.better), ("worse", self.worse)):
            assert result is not None
            verdict = (
                "did not start"
                if not started(result)
                else "timed out"
                if result.timed_out
                else "pass"
                if result.exit_code == 0
                else "fail"
            )
            sides.append(f"{name} {verdict} (exit {result.exit_code})")
        return "; ".join(sides)


def started(result: ExecResult) -> bool:
    """Whether the probe itself ran (the file was written and the command began).

    Args:
        result: one side's run.

    Returns:
        True when the start marker is in its stderr.
    """
    return STARTED in result.stderr


def probe_command(probe: Probe) -> str:
    """The shell command that writes the probe (from $GAGAR_PROBE) into a private folder and runs it there.

    The folder is made by mktemp (mode 700): each sandbox command runs under its own uid, so a shared path
    one command made would not be writable by the next.

    Args:
        probe: the probe.

    Returns:
        The command line; it runs in the candidate's tree.
    """
    path = f'"$probe_dir"/{shlex.quote(probe.script.name)}'
    write = f'probe_dir=$(mktemp -d) && printf "%s" "$GAGAR_PROBE" > {path}'
    return f"{write} && echo {shlex.quote(STARTED)} >&2 && {probe.command.format(probe=path)}"


def run_probes(
    bench: Benchmark,
    backend: str = "docker",
    groups: Sequence[str] | None = None,
    limits: Limits | None = None,
) -> list[ProbeResult]:
    """Run every probe (of some groups) on its pair's two trees, one sandbox per group.

    Args:
        bench: a loaded benchmark.
        backend: the sandbox backend ("docker" runs the task's environment).
        groups: only the probes of these groups; None for all.
        limits: sandbox limits, or None for the defaults.

    Returns:
        One result per probe, in the benchmark's order. A group whose workspace or sandbox cannot be opened
        gives each of its probes an error result; nothing is raised for one group's failure.
    """
    wanted = [p for p in bench.probes if groups is None or p.group_id in groups]
    results: dict[Probe, ProbeResult] = {}
    for group_id in dict.fromkeys(p.group_id for p in wanted):
        probes = [p for p in wanted if p.group_id == group_id]
        try:
            with open_workspace(bench.groups[group_id]) as workspace:
                view = workspace.view()
                with open_task_sandbox(view, backend, limits) as sandbox:
                    for probe in probes:
                        results[probe] = _run_one(probe, sandbox, set(view.targets()))
        except GagarError as exc:
            for probe in probes:
                results.setdefault(probe, ProbeResult(probe, None, None, error=str(exc)))
    return [results[p] for p in wanted]


def _run_one(probe: Probe, sandbox: Sandbox, targets: set[str]) -> ProbeResult:
    missing = [tid for tid in probe.pair if tid not in targets]
    if missing:
        return ProbeResult(
            probe, None, None, error=f"no tree for {', '.join(missing)} (did the patch apply?)"
        )
    try:
        env = {"GAGAR_PROBE": probe.script.read_text(encoding="utf-8")}
    except (OSError, UnicodeDecodeError) as exc:  # the probe travels as text: a binary one cannot
        return ProbeResult(
            probe, None, None, error=f"probe {probe.script.name} cannot be read as text: {exc}"
        )
    runs = sandbox.exec_many(list(probe.pair), probe_command(probe), env=env)
    return ProbeResult(probe, runs[probe.better], runs[probe.worse])
