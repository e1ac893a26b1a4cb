"""Every file gagar writes is replaced whole or not at all (`grader.util.atomic`).

The interrupted run is real: `gagar grade` in a subprocess under a file-size limit (RLIMIT_FSIZE, with
SIGXFSZ ignored so a write past the limit fails with EFBIG), which is what a full disk looks like to a writer.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from grader.graders.transcript import Transcript, read_transcript
from grader.util.atomic import remove_leftover_temporaries, replacing, write_lines_atomic, write_text_atomic
from tests.conftest import EXAMPLE_GROUP, REPO_ROOT


def _grade(out: Path, cache: Path, file_size_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(EXAMPLE_GROUP), "--out", str(out)],
        cwd=REPO_ROOT,
        env={**os.environ, "GAGAR_CACHE": str(cache)},
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=None if file_size_limit is None else limit,
    )


def test_a_rerun_stopped_by_a_full_disk_leaves_the_previous_results_whole(tmp_path: Path) -> None:
    out, cache = tmp_path / "run", tmp_path / "cache"
    first = _grade(out, cache)
    assert first.returncode == 0, first.stderr
    before = {name: (out / name).read_bytes() for name in ("results.jsonl", "groups.jsonl")}
    # Below the size of results.jsonl, above that of every other file the run writes (groups.jsonl, git's
    # objects in the workspace): the rerun grades, then fails writing its results.
    limit = len(before["results.jsonl"]) - 200
    assert len(before["groups.jsonl"]) < limit

    second = _grade(out, cache, file_size_limit=limit)

    assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr[-2000:]
    named = f"File too large (writing {out / 'results.jsonl'}; its previous content is kept)"
    errors = [line for line in second.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and named in errors[0], second.stderr
    after = {name: (out / name).read_bytes() for name in before}
    assert after == before
    for line in after["results.jsonl"].decode().splitlines():
        json.loads(line)  # no cut line
    assert sorted(p.name for p in out.iterdir()) == ["groups.jsonl", "results.jsonl"]  # no temporary left


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "results.jsonl"
    target.write_text("old\n")

    def rows():
        yield "new 1"
        raise RuntimeError("the producer failed halfway")

    with pytest.raises(RuntimeError, match="halfway"):
        write_lines_atomic(target, rows())
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.jsonl"]

    assert write_lines_atomic(target, ["a", "b"]) == 2
    assert target.read_text() == "a\nb\n"


def test_permissions_are_those_of_a_plain_write_unless_asked(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("x")
    write_text_atomic(tmp_path / "atomic", "x")
    write_text_atomic(tmp_path / "secret", "s", mode=0o600)
    mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
    assert mode(tmp_path / "atomic") == mode(plain)
    assert mode(tmp_path / "secret") == 0o600


def test_the_old_file_stays_readable_until_the_new_one_is_complete(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("old")
    with replacing(target) as handle:
        handle.write("new")
        handle.flush()
        assert target.read_text() == "old"
    assert target.read_text() == "new"


def test_a_transcript_replaces_the_previous_one_only_when_complete(tmp_path: Path) -> None:
    path = tmp_path / "transcripts" / "g.jsonl"
    first = Transcript(path)
    first.event("start", n=1)
    first.close()
    second = Transcript(path)
    second.event("start", n=2)
    # mid-grading: the complete previous transcript is still in place; the new events are on disk beside it
    assert [e["n"] for e in read_transcript(path)] == [1]
    (partial,) = [p for p in path.parent.iterdir() if p.name != "g.jsonl"]
    assert json.loads(partial.read_text())["n"] == 2
    second.close()
    assert [e["n"] for e in read_transcript(path)] == [2]
    assert [p.name for p in path.parent.iterdir()] == ["g.jsonl"]


def test_a_killed_writers_temporary_is_swept_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "records").mkdir()
    writer = subprocess.Popen(
        [
            sys.executable, "-c",
            "import sys, time\n"
            "from grader.util.atomic import replacing\n"
            "with replacing(sys.argv[1]) as handle:\n"
            "    handle.write('half'); handle.flush(); print('writing', flush=True); time.sleep(60)\n",
            str(tmp_path / "records" / "2.json"),
        ],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert writer.stdout is not None and writer.stdout.readline() == "writing\n"
    writer.kill()
    writer.wait()
    left = list((tmp_path / "records").glob(".2.json.*.tmp"))
    assert len(left) == 1 and not (tmp_path / "records" / "2.json").exists()
    kept = [tmp_path / ".keep.tmp", tmp_path / "notes.tmp", tmp_path / "records" / "1.json"]
    for path in kept:
        path.write_text("mine")
    assert remove_leftover_temporaries(tmp_path) == left
    assert not left[0].exists() and all(p.read_text() == "mine" for p in kept)
    assert remove_leftover_temporaries(tmp_path / "absent") == []
