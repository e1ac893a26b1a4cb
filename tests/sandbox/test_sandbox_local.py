"""The local backend: the same escapes as Docker where its isolation applies, refusal where none is had."""

from __future__ import annotations

import os
import signal
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from grader.sandbox import Limits, SandboxUnavailable, open_sandbox
from grader.sandbox import local as local_backend
from tests.support.conftest_sandbox import make_repo, spawn_grader
from tests.support.sandbox_contract import (  # noqa: F401 - collected here, on this module's fixtures
    test_endless_loop_stops_at_the_timeout,
    test_git_says_the_tree_is_no_repository,
    test_huge_output_is_cut_and_reported,
    test_tests_is_an_executable_in_a_shell_line,
)

WHY_NOT = {level: local_backend.available(level) for level in ("bubblewrap", "namespaces")}
LEVELS = [level for level, why in WHY_NOT.items() if why is None]
NO_ISOLATION = "no isolation works here: " + "; ".join(f"{level}: {why}" for level, why in WHY_NOT.items())
# The host's python3 may have no pytest: a test command that needs nothing but the tree.
TEST_COMMAND = "python3 -c 'import pkg; assert pkg.add(2, 3) == 5; print(\"1 passed\")'"
LIMITS = Limits(memory_bytes=512 * 1024**2, pids=64, timeout=20, kill_after=1, output_bytes=256 * 1024)

needs_isolation = pytest.mark.skipif(not LEVELS, reason=NO_ISOLATION)
needs_bubblewrap = pytest.mark.skipif(
    WHY_NOT["bubblewrap"] is not None, reason=f"bubblewrap does not work here: {WHY_NOT['bubblewrap']}"
)


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory):
    return make_repo(tmp_path_factory.mktemp("local-repo"))


@pytest.fixture(scope="module", params=LEVELS or ["unavailable"])
def sandbox(request, trees):
    if request.param == "unavailable":
        pytest.skip(NO_ISOLATION)
    with open_sandbox(
        trees, backend="local", isolation=request.param, limits=LIMITS, test_command=TEST_COMMAND
    ) as sb:
        yield sb


def _our_dirs() -> list[str]:
    return sorted(
        str(p) for p in Path(tempfile.gettempdir()).glob(f"{local_backend.DIR_PREFIX}{os.getpid()}-*")
    )


def test_isolation_is_reported(sandbox) -> None:
    result = sandbox.exec("A", "ls")
    assert result.ok and result.isolation == sandbox.isolation in LEVELS
    assert result.stdout.split() == ["a.txt", "a_only.txt", "pkg", "tests"]


def test_network_call_fails(sandbox) -> None:
    probe = "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n"
    probe += "except OSError as e:\n    print('blocked', e)\nelse:\n    print('connected')\n"
    assert "blocked" in sandbox.exec("base", ["python3", "-c", probe]).stdout


def test_fork_bomb_is_contained(sandbox) -> None:
    started = time.monotonic()
    result = sandbox.exec("A", "bomb() { bomb | bomb & }; bomb; sleep 3", timeout=5)
    assert time.monotonic() - started < 15, result
    assert sandbox.exec("A", "true", timeout=5).ok


def test_memory_hog_fails(sandbox) -> None:
    result = sandbox.exec("A", ["python3", "-c", "x = bytearray(2 * 1024**3); print(len(x))"])
    assert result.exit_code != 0 and "MemoryError" in result.stderr


def test_host_environment_does_not_leak(sandbox, monkeypatch) -> None:
    monkeypatch.setenv("GAGAR_SECRET_TOKEN", "s3cret")
    result = sandbox.exec("A", "env", env={"MINE": "1"})
    assert "s3cret" not in result.stdout and "MINE=1" in result.stdout


def test_candidates_do_not_see_each_other_and_start_pristine(sandbox) -> None:
    results = sandbox.exec_many(["B", "A"], "cat a.txt; ls *_only.txt; echo more >> a.txt; echo x > new.txt")
    assert list(results) == ["B", "A"]
    assert results["B"].stdout == "changed by B\nb_only.txt\n" and results["A"].stdout == "base\na_only.txt\n"
    again = sandbox.exec("A", "cat a.txt; ls")
    assert again.stdout == "base\na.txt\na_only.txt\npkg\ntests\n"


@needs_bubblewrap
def test_a_probe_starts_at_its_root_and_imports_it_from_anywhere(sandbox) -> None:
    probe = 'cd "$TMPDIR" && python3 -c \'import pkg; print(pkg.add(2, 3))\' && cd "$OLDPWD" && ls a.txt'
    result = sandbox.exec("A", probe, env={"PYTHONPATH": "/nowhere"})
    assert result.ok and result.stdout == "5\na.txt\n", result


def test_targets_running_at_once_each_have_their_own_tmp(sandbox) -> None:
    probe = (
        "echo $(cat a.txt) > /tmp/probe.out && sleep 0.3 && cat /tmp/probe.out && ls -A /tmp | grep -c probe"
    )
    results = sandbox.exec_many(["base", "A", "B"], probe)
    assert {t: r.stdout for t, r in results.items()} == {
        "base": "base\n1\n",
        "A": "base\n1\n",
        "B": "changed by B\n1\n",
    }
    assert not Path("/tmp/probe.out").exists()  # nothing reached the host's /tmp


@needs_bubblewrap
def test_bubblewrap_hides_host_files_and_blocks_writes(trees) -> None:
    marker = Path("/tmp") / f"gagar-marker-{uuid.uuid4().hex}"
    marker.write_text("host secret")
    try:
        with open_sandbox(trees, backend="local", isolation="bubblewrap", limits=LIMITS) as sb:
            seen = sb.exec("A", f"cat {marker} || echo MISSING")
            assert "host secret" not in seen.stdout and "MISSING" in seen.stdout
            places = ["/gagar", "/etc/gagar", "/usr/gagar", str(Path.home() / "gagar"), str(trees.repo / "x")]
            script = "; ".join(f"(echo x > {p}) 2>/dev/null && echo WROTE {p}" for p in places)
            assert "WROTE" not in sb.exec("A", script + "; true").stdout
    finally:
        marker.unlink()


def test_unavailable_isolation_is_refused(trees, monkeypatch) -> None:
    with pytest.raises(SandboxUnavailable, match="unknown isolation"):
        open_sandbox(trees, backend="local", isolation="chroot")
    monkeypatch.setattr(local_backend, "available", lambda level: None if level == "none" else "missing")
    with pytest.raises(SandboxUnavailable, match="isolation='none'"):
        open_sandbox(trees, backend="local")
    with pytest.raises(SandboxUnavailable, match="not available"):
        open_sandbox(trees, backend="local", isolation="namespaces")
    with open_sandbox(trees, backend="local", isolation="none") as sb:
        result = sb.exec("A", "cat a_only.txt")
        assert result.stdout == "A\n" and result.isolation == "none"


@needs_isolation
def test_setup_runs_once_per_target(trees) -> None:
    with open_sandbox(trees, backend="local", setup="echo built >> built.txt", limits=LIMITS) as sb:
        for _ in range(2):
            assert sb.exec("A", "cat built.txt").stdout == "built\n"
        assert set(sb.setup_results) == {"A"}


@needs_isolation
def test_nothing_left_after_100_runs_and_after_an_exception(trees) -> None:
    before = _our_dirs()
    with open_sandbox(trees, backend="local", isolation=LEVELS[-1], limits=LIMITS) as sb:
        for i in range(100):
            assert sb.exec("AB"[i % 2], ["true"]).ok
        assert not any(sb._root.iterdir())
    with pytest.raises(RuntimeError), open_sandbox(trees, backend="local", limits=LIMITS) as sb:
        sb.exec("A", "true")
        raise RuntimeError("grading failed")
    assert _our_dirs() == before


@needs_isolation
def test_sigkill_leftovers_are_cleaned_and_sigterm_cleans_itself(tmp_path) -> None:
    from grader.sandbox.leftovers import cleanup_leftovers

    proc, root = spawn_grader(tmp_path / "k", "local")
    proc.kill()
    proc.wait()
    assert Path(root).exists()
    assert root in cleanup_leftovers(docker_too=False)
    assert not Path(root).exists()

    proc, root = spawn_grader(tmp_path / "t", "local")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert not Path(root).exists()


# Every place a command may write, as the command names it; all must be its own and gone after it.
WRITABLE = ("/tmp", "/dev/shm", "/var/tmp", "$HOME", "$TMPDIR", ".")


def test_every_writable_place_is_private_to_its_command_and_gone_after(sandbox) -> None:
    marker = f"gagar-leak-{uuid.uuid4().hex}"
    write = "; ".join(f"echo x > \"{place}/{marker}\" && echo 'wrote {place}'" for place in WRITABLE)
    wrote = sandbox.exec("B", write)
    assert wrote.stdout.split("\n")[:-1] == [f"wrote {place}" for place in WRITABLE], wrote
    look = "; ".join(f'cat "{place}/{marker}" 2>/dev/null' for place in WRITABLE) + "; true"
    for target in ("A", "B"):  # the next candidate's command, and the same candidate's next one
        seen = sandbox.exec(target, look)
        assert seen.ok and seen.stdout == "", (target, seen)
    on_host = [p for p in ("/tmp", "/dev/shm", "/var/tmp") if (Path(p) / marker).exists()]
    assert on_host == [] and not any(sandbox._root.iterdir())


def test_the_host_outside_the_private_places_is_read_only(sandbox, trees) -> None:
    places = ["/gagar", "/etc/gagar", "/usr/gagar", str(Path.home() / "gagar"), str(trees.repo / "x")]
    places += [str(Path(tempfile.gettempdir()).parent / "gagar"), "/run/gagar"]
    script = "; ".join(f"(echo x > {p}) 2>/dev/null && echo WROTE {p}" for p in places)
    result = sandbox.exec("A", script + "; true")
    assert result.ok and "WROTE" not in result.stdout, result


def test_relative_import_paths_mean_the_tree_from_any_directory(sandbox) -> None:
    show = "python3 -c 'import extra, pkg; print(extra.where, pkg.__file__)'"
    script = (
        "mkdir lib && echo 'where = __file__' > lib/extra.py && root=$(pwd) && "
        f'for dir in / "$TMPDIR" pkg; do (cd "$dir" && {show}); done; echo "$root" "$PYTHONPATH"'
    )
    result = sandbox.exec("A", script, env={"PYTHONPATH": "lib:."})
    *imports, paths = result.stdout.splitlines()
    root, pythonpath = paths.split()
    assert result.ok and pythonpath == f"{root}:{root}/lib", result
    assert imports == [f"{root}/lib/extra.py {root}/pkg/__init__.py"] * 3, result
