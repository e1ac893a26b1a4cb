"""`gagar sandbox exec`: its exit status is the command's own, and options work after TARGET (issue 37.3).

Run as a user runs it, a subprocess from the repository root, on the bundled example group, in a real Docker
container (the default backend) and in the local backend.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import EXAMPLE_GROUP, run_gagar


@pytest.mark.docker
def test_the_exit_status_is_the_commands_own_in_docker(sandbox_images: None) -> None:
    proc = run_gagar("sandbox", "exec", str(EXAMPLE_GROUP), "base", "--", "sh", "-c", "exit 7")
    assert proc.returncode == 7, proc.stderr
    assert json.loads(proc.stdout)["exit_code"] == 7
    passing = run_gagar("sandbox", "exec", str(EXAMPLE_GROUP), "clean", "--", "python", "-m", "pytest", "-q")
    assert passing.returncode == 0, passing.stdout + passing.stderr
    assert json.loads(passing.stdout)["isolation"] == "docker"


def test_options_after_the_target_are_options_not_the_command() -> None:
    # Without `--`: the options end at the first word that is not one of them.
    proc = run_gagar(
        "sandbox", "exec", str(EXAMPLE_GROUP), "base", "--backend", "local", "--timeout=20", "ls"
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["isolation"] != "docker" and "inventory" in result["stdout"].split()
    # With `--`: everything after it is the command, options included.
    proc = run_gagar(
        "sandbox",
        "exec",
        str(EXAMPLE_GROUP),
        "base",
        "--backend",
        "local",
        "--",
        "sh",
        "-c",
        "echo --timeout",
    )
    assert proc.returncode == 0 and json.loads(proc.stdout)["stdout"] == "--timeout\n", proc.stderr


def test_a_missing_command_and_a_timeout_have_their_own_statuses() -> None:
    missing = run_gagar(
        "sandbox", "exec", str(EXAMPLE_GROUP), "base", "--backend", "local", "no-such-command"
    )
    assert missing.returncode == 127, missing.stderr
    late = run_gagar(
        "sandbox",
        "exec",
        str(EXAMPLE_GROUP),
        "base",
        "--backend",
        "local",
        "--timeout",
        "1",
        "--",
        "sleep",
        "30",
    )
    assert late.returncode == 124 and json.loads(late.stdout)["timed_out"] is True, late.stderr
