"""What every sandbox backend promises, whatever its isolation. Each backend's test module imports these
tests, so pytest runs them there on that module's own `sandbox` fixture."""

from __future__ import annotations


def test_endless_loop_stops_at_the_timeout(sandbox) -> None:
    result = sandbox.exec("A", "while :; do :; done", timeout=2)
    assert result.timed_out and result.exit_code in (124, 137)
    assert 2 <= result.seconds < 2 + sandbox.limits.kill_after + 2


def test_huge_output_is_cut_and_reported(sandbox) -> None:
    result = sandbox.exec("A", "head -c 50000000 /dev/zero | tr '\\0' x; echo END", timeout=30)
    assert result.ok and result.truncated and "bytes cut ...]" in result.stdout
    assert result.stdout.rstrip().endswith("END") and len(result.stdout) < sandbox.limits.output_bytes + 200


def test_tests_is_an_executable_in_a_shell_line(sandbox) -> None:
    script = "cd pkg && tests 2>&1 | tail -n 1; command -v tests; sh -c 'tests -x' | tail -n 1"
    result = sandbox.exec("A", script)
    summary, where, again = result.stdout.splitlines()
    assert result.ok and "1 passed" in summary and "1 passed" in again, result
    assert where.endswith("/bin/tests"), where


def test_git_says_the_tree_is_no_repository(sandbox) -> None:
    result = sandbox.exec("A", "git status; echo exit=$?; cd pkg && git diff HEAD; echo exit=$?")
    assert result.stdout.splitlines() == ["exit=128", "exit=128"], result
    assert result.stderr.count("no git repository here") == 2 and "export" in result.stderr, result
    made = sandbox.exec("A", 'cd "$TMPDIR" && git init -q r && cd r && git status --short && echo made')
    assert made.ok and made.stdout == "made\n", made  # a repository a command makes is git's as usual
