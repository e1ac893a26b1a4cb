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
