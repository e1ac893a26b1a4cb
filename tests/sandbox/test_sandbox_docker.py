"""The Docker backend against the real engine: escapes, limits, separation of trees, and cleanup."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from grader.sandbox import Limits, SandboxError, open_sandbox
from tests.support.conftest_sandbox import docker_marks, make_repo, spawn_grader
from tests.support.sandbox_contract import (  # noqa: F401 - collected here, on this module's fixtures
    test_endless_loop_stops_at_the_timeout,
    test_git_says_the_tree_is_no_repository,
    test_huge_output_is_cut_and_reported,
    test_tests_is_an_executable_in_a_shell_line,
)

ROOT = Path(__file__).resolve().parents[2]


pytestmark = [*docker_marks(), pytest.mark.usefixtures("sandbox_images")]


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory):
    return make_repo(tmp_path_factory.mktemp("docker-repo"))


LIMITS = Limits(memory_bytes=256 * 1024**2, pids=64, timeout=20, kill_after=1, output_bytes=256 * 1024)


@pytest.fixture(scope="module")
def sandbox(trees):
    with open_sandbox(trees, limits=LIMITS, test_command="python3 -m pytest -q -p no:cacheprovider") as sb:
        yield sb


def _our_containers() -> list[str]:
    import docker

    client = docker.from_env()
    found = client.containers.list(
        all=True, filters={"label": ["gagar.sandbox=1", f"gagar.pid={os.getpid()}"]}
    )
    return [c.name for c in found]


def test_runs_as_non_root_in_docker_isolation(sandbox) -> None:
    result = sandbox.exec("A", "id -u; pwd; ls")
    uid, cwd, *files = result.stdout.split()
    assert result.ok and result.isolation == "docker"
    assert int(uid) != 0 and cwd.startswith("/scratch/")
    assert "a_only.txt" in files and "b_only.txt" not in files


def test_network_call_fails(sandbox) -> None:
    probe = "import socket\ntry:\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n"
    probe += "except OSError as e:\n    print('blocked', e)\nelse:\n    print('connected')\n"
    result = sandbox.exec("base", ["python3", "-c", probe])
    assert "blocked" in result.stdout, result
    interfaces = sandbox.exec("base", "ls /sys/class/net").stdout.split()
    assert interfaces == ["lo"]


def test_fork_bomb_is_contained(sandbox) -> None:
    started = time.monotonic()
    result = sandbox.exec("A", "bomb() { bomb | bomb & }; bomb; sleep 3", timeout=5)
    assert time.monotonic() - started < 15
    assert result.exit_code in (0, 2, 124, 137) or result.timed_out
    after = sandbox.exec("A", "ls /proc | grep -c '^[0-9]'", timeout=5)
    assert after.ok and int(after.stdout) < 10, after  # the bomb's processes are all gone


def test_memory_hog_is_killed_and_reported(sandbox) -> None:
    result = sandbox.exec("A", ["python3", "-c", "x = bytearray(1024**3); print(len(x))"], timeout=20)
    assert result.exit_code == 137 and not result.timed_out, result
    assert "memory limit" in result.stderr


def test_writes_outside_scratch_fail(sandbox) -> None:
    places = [
        "/gagar",
        "/etc/gagar",
        "/usr/lib/gagar",
        "/pristine/gagar",
        "/home/sandbox/gagar",
    ]
    script = "; ".join(f"(echo x > {p}) 2>/dev/null && echo WROTE {p}" for p in places)
    result = sandbox.exec("A", script + "; true")
    assert "WROTE" not in result.stdout, result.stdout


def test_host_files_are_invisible(sandbox) -> None:
    marker = Path("/tmp") / f"gagar-marker-{uuid.uuid4().hex}"
    marker.write_text("host secret")
    try:
        result = sandbox.exec("A", f"cat {marker} || echo MISSING; ls /tmp")
        assert "host secret" not in result.stdout and "MISSING" in result.stdout
        assert ROOT.name not in sandbox.exec("A", "ls / /home").stdout
    finally:
        marker.unlink()


def test_candidates_do_not_see_each_other(sandbox) -> None:
    a = sandbox.exec("A", "cat a.txt; ls /pristine /scratch 2>&1; find / -name b_only.txt 2>/dev/null; true")
    assert "b_only.txt" not in a.stdout and a.stdout.startswith("base\n")
    results = sandbox.exec_many(["B", "A", "base"], "cat a.txt; ls *_only.txt 2>/dev/null; true")
    assert list(results) == ["B", "A", "base"]
    assert results["B"].stdout == "changed by B\nb_only.txt\n"
    assert results["A"].stdout == "base\na_only.txt\n"
    assert results["base"].stdout == "base\n"


def test_each_target_has_its_own_tmp_starts_at_its_root_and_imports_it(sandbox) -> None:
    # One probe on three targets: a fixed /tmp name, a script run from /tmp that imports the tree, and a wait
    # so that targets running at the same time would meet (each target's uid owning the name in turn).
    probe = (
        "pwd > /tmp/probe.out; ls /tmp >> /tmp/probe.out; cat > /tmp/probe.py <<'EOF'\n"
        "import os, pkg\nprint(os.path.dirname(pkg.__path__[0]) == os.environ['ROOT'], pkg.add(2, 3))\nEOF\n"
        "export ROOT=$(pwd) && cd /tmp && sleep 0.3 && python3 probe.py && cat probe.out && cat $ROOT/a.txt"
    )
    results = sandbox.exec_many(["base", "A", "B"], probe)
    for target, r in results.items():
        assert r.ok, (target, r)
        verdict, root, listing, *rest = r.stdout.splitlines()
        assert verdict == "True 5" and root.startswith("/scratch/") and root.endswith("/t")
        assert listing == "probe.out"  # nothing of another target's in /tmp
    assert results["B"].stdout.endswith("changed by B\n") and results["A"].stdout.endswith("base\n")


def test_targets_run_at_once_in_containers_of_their_own(trees) -> None:
    # Each target prints when it started and ended; with two slots, two targets' commands overlap in time
    # (however slow the machine) and each ran in its own container (its own /tmp, holding only its file).
    probe = "date +%s.%N; echo $(cat a.txt) > /tmp/mine; sleep 1; ls -A /tmp; date +%s.%N"
    with open_sandbox(trees, limits=LIMITS, slots=2) as sb:
        assert sb.slots == sb.commands_at_once == 2 and len(set(sb.container_ids)) == 2
        results = sb.exec_many(["base", "A"], probe)
    spans = {}
    for target, r in results.items():
        begun, listing, ended = r.stdout.split()
        assert r.ok and listing == "mine", (target, r)
        spans[target] = (float(begun), float(ended))
    assert spans["base"][0] < spans["A"][1] and spans["A"][0] < spans["base"][1], spans


def test_relative_import_paths_mean_the_tree_from_any_directory(trees) -> None:
    show = "python3 -c 'import extra, pkg; print(extra.where, pkg.__file__)'"
    script = (
        "mkdir lib && echo 'where = __file__' > lib/extra.py && root=$(pwd) && "
        f'for dir in / "$TMPDIR" pkg; do (cd "$dir" && {show}); done; echo "$root" "$PYTHONPATH"'
    )
    # The image's PYTHONPATH, as a task environment sets it (src:.), and the caller's: both relative.
    with open_sandbox(trees, image="gagar/python:latest", limits=LIMITS) as sb:
        result = sb.exec("A", script, env={"PYTHONPATH": "lib:."})
    *imports, paths = result.stdout.splitlines()
    root, pythonpath = paths.split()
    assert result.ok and pythonpath == f"{root}:{root}/lib", result
    assert imports == [f"{root}/lib/extra.py {root}/pkg/__init__.py"] * 3, result


def test_every_exec_starts_pristine(sandbox) -> None:
    first = sandbox.exec(
        "A",
        "echo new > new.txt; echo more >> a.txt; echo leak > /tmp/leak-$(id -u); echo leak > /scratch/leak; "
        "setsid sh -c 'sleep 1; echo late > a.txt' >/dev/null 2>&1 & echo started",
    )
    assert first.ok and "started" in first.stdout
    time.sleep(1.5)
    second = sandbox.exec("A", "ls; cat a.txt; ls /tmp /scratch/leak 2>&1")
    assert "new.txt" not in second.stdout and "leak-" not in second.stdout
    assert "No such file" in second.stdout
    assert "base\n" in second.stdout and "late" not in second.stdout and "more" not in second.stdout


def test_a_tree_nothing_changed_is_kept_and_any_change_means_a_fresh_copy(trees) -> None:
    # The tree's root directory gets a new ctime with every copy; a kept tree keeps its.
    copied = "stat -c %z ."
    changes = {
        "appended": "echo more >> a.txt",
        "created in a subdirectory": "echo x > tests/new.py",
        "removed": "rm pkg/__init__.py",
        "renamed": "mv a.txt z.txt",
        "mode": "chmod 600 a.txt",
        "mtime set back": "touch -d 2000-01-01 a.txt",
        "directory made": "mkdir pkg/sub",
    }
    with open_sandbox(trees, limits=LIMITS) as sb:
        first = sb.exec("B", copied).stdout
        assert first and sb.exec("B", copied).stdout == first  # nothing changed: the same tree
        assert sb.exec("A", copied).stdout != first  # every target has its own
        for what, change in changes.items():
            before = sb.exec("B", copied).stdout
            assert sb.exec("B", change).ok, what
            intact = "test -e pkg/__init__.py && test ! -e pkg/sub && test ! -e tests/new.py && echo intact"
            after = sb.exec("B", f"{copied}; cat a.txt; ls -l --time-style=+%Y a.txt; {intact}")
            assert after.ok, (what, after)
            when, content, listing, check = after.stdout.splitlines()
            assert when != before, what  # a fresh copy
            assert content == "changed by B" and "-rw-r--r--" in listing and " 2000 " not in listing, what
            assert check == "intact", what


def test_a_tree_made_from_its_changes_equals_its_whole_archive(tmp_path) -> None:
    import os

    from tests.support.conftest_sandbox import GitTrees, WholeGitTrees

    repo = tmp_path / "repo"
    repo.mkdir()

    def commit(message: str) -> None:
        for args in (["add", "-A"], ["commit", "-qm", message]):
            subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)

    subprocess.run(["git", "-C", str(repo), "init", "-q", "-b", "main"], check=True)
    odd = ["sp ace.txt", "-dash.txt", "star*.txt", "new\nline.txt", os.fsdecode(b"bad\xffname.txt")]
    files = {
        "same.txt": "same\n",
        "dir/keep.txt": "k\n",
        "dir/gone/only.txt": "o\n",
        "file_to_dir": "f\n",
        "dir_to_file/x.txt": "x\n",
        "tool.sh": "echo\n",
        **{name: "odd\n" for name in odd},
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    os.symlink("same.txt", repo / "link")
    commit("base")
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "A"], check=True)
    (repo / "dir/gone/only.txt").unlink()
    (repo / "dir/gone").rmdir()
    (repo / "file_to_dir").unlink()
    (repo / "file_to_dir").mkdir()
    (repo / "file_to_dir/inside.txt").write_text("i\n")
    (repo / "dir_to_file/x.txt").unlink()
    (repo / "dir_to_file").rmdir()
    (repo / "dir_to_file").write_text("now a file\n")
    (repo / "tool.sh").chmod(0o755)
    (repo / "link").unlink()
    (repo / "link").write_text("was a link\n")
    os.symlink("dir/keep.txt", repo / "new_link")
    for name in odd:
        (repo / name).write_text("changed\n")
    commit("A")
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "-b", "B", "main"], check=True)
    (repo / odd[0]).unlink()
    commit("B")
    branches = {"base": "main", "A": "A", "B": "B"}
    # Every entry: type, mode, size, link target, name; then every file's bytes.
    listing = (
        "find . -path ./__pycache__ -prune -o -printf '%y %m %s %l %p\\0' | sort -z | tr '\\0' '\\n'; "
        "find . -type f -print0 | sort -z | xargs -0 sha256sum"
    )
    seen = {}
    for source in (GitTrees(repo, branches), WholeGitTrees(repo, branches)):
        with open_sandbox(source, limits=LIMITS, slots=2) as sb:  # the second slot has no base target
            runs = sb.exec_many(["base", "A", "B"], listing)
        assert all(r.ok for r in runs.values()), runs
        seen[type(source).__name__] = {t: r.stdout for t, r in runs.items()}
    assert seen["GitTrees"] == seen["WholeGitTrees"]
    assert "./dir/gone" not in seen["GitTrees"]["A"] and "./dir/gone" in seen["GitTrees"]["base"]
    assert "./file_to_dir/inside.txt" in seen["GitTrees"]["A"]


def test_a_set_up_tree_is_what_the_setup_left_first_kept_then_copied(trees) -> None:
    # The setup writes, rewrites, removes, makes private, links and nests; root adopts the result by linking
    # what it left alone and copying the rest, and the first command runs in the setup's own tree.
    setup = (
        "echo made > made.txt && mkdir -p made/deep && echo deep > made/deep/f && echo set up > a.txt && "
        "rm tests/test_add.py && chmod 600 made.txt && ln -s a.txt link && python3 -c 'import pkg'"
    )
    state = (
        "stat -c %z .; find . -printf '%y %m %s %l %p\\n' | sort; "
        "find . -type f -print0 | sort -z | xargs -0 sha256sum"
    )
    with open_sandbox(trees, limits=LIMITS, setup=setup, slots=1) as sb:
        first = sb.exec("B", state)
        assert first.ok and sb.setup_results["B"].ok, (first, sb.setup_results)
        copied_at, listing = first.stdout.split("\n", 1)
        # made.txt: what a setup makes is left readable by all (root adopts it), never writable by others.
        for entry in ("f 644 7  ./a.txt\n", "l 777 5 a.txt ./link\n", "f 644 5  ./made.txt", "./made/deep/f"):
            assert entry in listing, (entry, listing)
        assert "./tests/test_add.py" not in listing and "./b_only.txt" in listing
        assert sb.exec("B", "stat -c %z .").stdout.strip() == copied_at  # the setup's tree, kept
        assert sb.exec("B", "echo more >> a.txt").ok  # a change: the next command gets a fresh copy
        again = sb.exec("B", state)
        assert again.ok and again.stdout.split("\n", 1)[0] != copied_at
        assert again.stdout.split("\n", 1)[1] == listing  # the adopted tree: what the setup left, exactly
        assert sb.exec("base", "cat a.txt; test -e tests/test_add.py || echo gone").stdout == "set up\ngone\n"


def test_run_tests_and_setup(trees) -> None:
    with open_sandbox(
        trees, setup="echo built > built.txt", test_command="python3 -m pytest -q -p no:cacheprovider"
    ) as sb:
        assert sb.run_tests("base").ok
        seen = sb.exec_many(["A", "B"], "cat built.txt; echo x > built.txt")
        assert all(r.stdout == "built\n" for r in seen.values())
        assert sb.exec("A", "cat built.txt").stdout == "built\n"  # setup result stays pristine
        assert set(sb.setup_results) == {"base", "A", "B"} and all(r.ok for r in sb.setup_results.values())


def test_task_image_is_used_as_is(trees) -> None:
    with open_sandbox(trees, image="gagar/minimal:latest") as sb:
        result = sb.exec("A", "command -v python3 || echo no-python; cat a_only.txt")
        assert result.stdout == "no-python\nA\n"


def test_closed_sandbox_refuses(trees) -> None:
    sb = open_sandbox(trees)
    sb.close()
    with pytest.raises(SandboxError):
        sb.exec("A", "true")
    with open_sandbox(trees) as other, pytest.raises(SandboxError, match="unknown target"):
        other.exec("nope", "true")


def test_host_watchdog_kills_what_outlives_its_timeout(trees, monkeypatch) -> None:
    import grader.sandbox.docker as backend

    # A wrapper without the in-container `timeout`: only the host watchdog can stop the command.
    monkeypatch.setattr(backend, "_WRAPPER", 'cd /tmp && exec "$@"')
    limits = Limits(timeout=1, kill_after=0.5, watchdog_grace=0.5)
    with open_sandbox(trees, limits=limits) as sb:
        result = sb.exec("A", ["sleep", "60"])
        assert result.timed_out and result.exit_code == -9 and result.seconds < 10
        assert sb.exec("A", ["true"]).ok


def test_nothing_left_after_100_runs(trees) -> None:
    before = _our_containers()
    with open_sandbox(trees) as sb:
        for i in range(100):
            assert sb.exec("AB"[i % 2], ["true"]).ok
        for slot in sb._slots:
            # What stays is one box per target run in the slot, holding its kept tree and nothing else.
            run = slot.container.exec_run
            assert run(["ls", "-A", "/tmp"], user="0:0").output == b""
            boxes = run(["ls", "/scratch"], user="0:0").output.decode().split()
            assert sorted(boxes) == sorted(box.split("/")[-1] for _, box in slot.boxes.values())
            for uid, box in slot.boxes.values():
                held = run(["ls", "-A", box], user=f"{uid}:{uid}").output.decode().split()
                assert held == [".started", "t"], held
    assert _our_containers() == before


def test_nothing_left_after_an_exception(trees) -> None:
    before = _our_containers()
    with pytest.raises(RuntimeError, match="grading failed"), open_sandbox(trees) as sb:
        sb.exec("A", "true")
        raise RuntimeError("grading failed")
    assert _our_containers() == before


def _exists(container_id: str) -> bool:
    import docker
    import docker.errors

    try:
        docker.from_env().containers.get(container_id)
    except docker.errors.NotFound:
        return False
    return True


def _owned_by(pid: int) -> list[str]:
    """Containers the Docker engine holds for the grading process `pid` on this host (counted by label)."""
    import socket

    import docker

    labels = ["gagar.sandbox=1", f"gagar.pid={pid}", f"gagar.host={socket.gethostname()}"]
    return [c.name for c in docker.from_env().containers.list(all=True, filters={"label": labels})]


def test_after_kill_9_the_next_grading_start_leaves_none_of_the_owners(tmp_path) -> None:
    from grader.servers.scripted import ScriptedServer, labels_in, tool_calls
    from tests.conftest import EXAMPLE_GROUP, run_gagar

    killed, _ = spawn_grader(tmp_path / "killed", "docker")
    killed.kill()  # SIGKILL: nothing in the process runs, its container stays
    killed.wait()
    assert len(_owned_by(killed.pid)) >= 1  # one container per slot

    def policy(request, n):  # one probe through the sandbox, then a ranking
        if n == 0:
            return tool_calls(("run", {"command": "true", "targets": ["base"]}))
        return tool_calls(
            ("submit_ranking", {"ranking": [labels_in(request)], "reasons": {}, "confidence": 1})
        )

    with ScriptedServer(policy) as server:  # the next grading: `gagar grade` with the LLM grader on Docker
        proc = run_gagar(
            "grade", str(EXAMPLE_GROUP), "--out", str(tmp_path / "run"), "--grader", "llm",
            "--model", "scripted", "--base-url", server.url, "--sandbox", "docker",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert _owned_by(killed.pid) == []  # reaped before the grading's first sandbox
    result = json.loads((tmp_path / "run" / "results.jsonl").read_text().splitlines()[0])
    transcript = (tmp_path / "run" / "transcripts").glob("*.jsonl")
    assert result["status"] == "graded" and any("== base: exit 0" in t.read_text() for t in transcript)


def test_a_container_ends_by_itself_within_its_lifetime(tmp_path) -> None:
    lifetime = 12.0
    limits = {"timeout": 2, "kill_after": 1, "watchdog_grace": 1, "lifetime": lifetime}
    started = time.monotonic()
    owner, container_id = spawn_grader(tmp_path, "docker", limits)
    # A stopped owner is alive to every reaper (like an owner on another host) but closes nothing:
    # only the container's own lifetime can end it.
    owner.send_signal(signal.SIGSTOP)
    try:
        assert _exists(container_id)
        while _exists(container_id) and time.monotonic() - started < lifetime + 30:
            time.sleep(0.5)
        ended = time.monotonic() - started
        assert not _exists(container_id) and ended < lifetime + 10, ended
        assert ended >= lifetime - 1  # it did live out its lifetime: nothing else removed it
    finally:
        owner.kill()
        owner.wait()


def test_a_sandbox_outliving_its_container_starts_a_new_one(trees) -> None:
    limits = Limits(timeout=1, kill_after=0.5, watchdog_grace=0.5, lifetime=9)
    # One slot, so `container_id` (the first slot's) is the container A's commands run in.
    with open_sandbox(trees, limits=limits, setup="echo built > built.txt", slots=1) as sb:
        assert sb.exec("A", "cat a_only.txt built.txt").stdout == "A\nbuilt\n"
        first = sb.container_id
        time.sleep(2.5)  # now a 1 s command could outlive the first container
        assert sb.exec("A", "cat a_only.txt built.txt").stdout == "A\nbuilt\n"  # set up again there
        second = sb.container_id
        assert second is not None and second != first
        with pytest.raises(SandboxError, match="lifetime"):
            sb.exec("A", "true", timeout=30)
    assert not _exists(first) and not _exists(second)


def test_sigterm_cleans_up_by_itself(tmp_path) -> None:
    proc, container_id = spawn_grader(tmp_path, "docker")
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    # Well under a second on an idle engine; the bound is the engine's own request timeout (60 s), which a
    # removal on a loaded engine approached once in CI (over 30 s). Slower means the process hangs.
    try:
        code = proc.wait(timeout=75)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"the grader was still running {time.monotonic() - sent:.0f} s after SIGTERM")
    assert code == -signal.SIGTERM
    assert not _exists(container_id)
