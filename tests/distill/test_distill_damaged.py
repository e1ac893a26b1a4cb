"""`gagar distill` resumes over damaged files: each is named, moved aside and made again, never stuck.

Real runs: the `gagar distill` command in a subprocess against the scripted teacher (real HTTP), over real
git repositories; the damage is what a cut write, a full disk or a hand edit leaves.
"""

from __future__ import annotations

import fcntl
import json
from pathlib import Path

import pytest

from grader.distill.run import check_resume, prepare_out, read_record
from grader.errors import DistillError
from grader.servers.scripted import ScriptedServer
from tests.conftest import run_gagar
from tests.support.distill_support import TEACHER_OPTIONS, teacher, write_inputs

SECRET = "secret 1\n"


@pytest.fixture(scope="module")
def server():
    with ScriptedServer(teacher) as running:
        yield running


def _distill(tmp_path: Path, out: Path, url: str) -> tuple[int, str]:
    inputs, reference = tmp_path / "groups.jsonl", tmp_path / "reference.json"
    if not inputs.exists():
        write_inputs(tmp_path)
    proc = run_gagar(
        "distill", str(inputs), "--reference", str(reference), "--model", "scripted", "--base-url", url,
        "--out", str(out), "--samples", "2", "--workers", "2", "--no-default-benchmarks", *TEACHER_OPTIONS,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


def _files(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def _first_run(tmp_path: Path, url: str) -> Path:
    """A whole run in `tmp_path/out` under a known secret; returns the folder."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "secret").write_text(SECRET)
    code, output = _distill(tmp_path, out, url)
    assert code == 0, output[-3000:]
    return out


def test_damaged_records_are_named_moved_aside_and_graded_again(tmp_path: Path, server) -> None:
    out = _first_run(tmp_path, server.url)
    whole = _files(out)
    records = sorted(name for name in whole if name.startswith("records/"))
    assert len(records) == 4  # 2 groups x 2 samples
    cut, empty_list, no_category, garbage = (out / name for name in records)
    cut.write_bytes(cut.read_bytes()[:100])
    empty_list.write_text("[]\n")
    record = json.loads(no_category.read_text())
    del record["category"]
    no_category.write_text(json.dumps(record))
    garbage.write_bytes(b"\xff\xfe\x00garbage")

    code, output = _distill(tmp_path, out, server.url)

    assert code == 0, output[-3000:]
    flat = output.replace("\n", "")
    for path, why in ((cut, "not JSON"), (empty_list, "not a JSON object but list"),
                      (no_category, "'category' is missing"), (garbage, "not UTF-8")):  # fmt: skip
        assert f"{path} is damaged ({why}" in flat, flat[-3000:]
        (aside,) = path.parent.glob(f"{path.name}.damaged-*")
        assert aside.read_bytes() != whole[path.relative_to(out).as_posix()]
    again = {name: data for name, data in _files(out).items() if ".damaged-" not in name}
    assert again == whole  # the same records and outputs as the undamaged run, byte for byte


def test_a_damaged_run_json_or_secret_is_named_moved_aside_and_made_again(tmp_path: Path, server) -> None:
    out = _first_run(tmp_path, server.url)
    (out / "run.json").write_text('{"format": 1, "fingerprints": {"prompts": "ab')

    code, output = _distill(tmp_path, out, server.url)

    assert code == 0, output[-3000:]
    assert f"{out / 'run.json'} is damaged (not JSON" in output.replace("\n", "")
    assert len(list(out.glob("run.json.damaged-*"))) == 1
    assert json.loads((out / "run.json").read_text())["format"] == 1

    (out / "secret").write_bytes(b"\xff\xfe")
    code, output = _distill(tmp_path, out, server.url)

    assert code == 0, output[-3000:]
    assert f"{out / 'secret'} is damaged" in output.replace("\n", "")
    assert len(list(out.glob("secret.damaged-*"))) == 1
    assert len((out / "secret").read_text().strip()) == 32


def test_a_file_nested_past_the_json_reader_depth_is_damaged_not_a_crash(tmp_path: Path) -> None:
    """A record or run.json of 100,000 open brackets (a hand edit, a hostile file) is named as damaged and
    moved aside, as a cut one is; Python's JSON reader raises RecursionError on it, no ValueError."""
    deep = "[" * 100_000
    record = tmp_path / "record.json"
    record.write_text(deep)
    found, problem = read_record(record, "g", 0)
    assert found is None and problem.startswith("not JSON"), problem
    (tmp_path / "run.json").write_text(deep)
    header = {"format": 1, "fingerprints": {}, "settings": {}, "teacher": {"model": "m", "base_url": "u"}}
    told: list[str] = []
    check_resume(tmp_path, header, told.append)
    assert len(told) == 1 and "run.json is damaged (not JSON" in told[0], told
    (aside,) = tmp_path.glob("run.json.damaged-*")
    assert aside.read_text() == deep
    assert json.loads((tmp_path / "run.json").read_text())["format"] == 1


def test_a_run_that_finds_another_writing_makes_no_secret(tmp_path: Path) -> None:
    """The secret is read or made under the run's lock: two runs started together cannot each make one and
    grade under the one the other overwrote."""
    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".lock", "a") as other_run:
        fcntl.flock(other_run, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(DistillError, match="another distillation run is writing here"):
            prepare_out(out)
    assert not (out / "secret").exists()
    secret = prepare_out(out)
    assert (out / "secret").read_text().strip() == secret and prepare_out(out) == secret
