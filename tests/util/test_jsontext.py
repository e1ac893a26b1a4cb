"""JSON from files gagar did not write: every failure is a ValueError, nesting included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.graders.transcript import read_transcript
from grader.inspect.run import load_run
from grader.util.jsontext import TooDeep, loads

DEEP = "[" * 100_000 + "]" * 100_000


def test_loads_reads_json_and_refuses_nesting_past_the_reader_as_a_value_error() -> None:
    assert loads('{"a": [1, 2]}') == {"a": [1, 2]}
    with pytest.raises(TooDeep, match="nested deeper than the JSON reader goes"):
        loads(DEEP)
    with pytest.raises(json.JSONDecodeError):
        loads("{")
    assert issubclass(TooDeep, ValueError)


def test_a_transcript_line_nested_too_deep_is_a_damaged_transcript(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"event": "start"}\n' + DEEP + "\n")
    with pytest.raises(ValueError, match="nested deeper"):
        read_transcript(path)


def test_gagar_show_names_a_transcript_nested_too_deep(tmp_path: Path) -> None:
    # The run readers take a damaged transcript as that group's lost detail, naming the file and line.
    from tests.conftest import run_gagar

    out = tmp_path / "run"
    graded = run_gagar("grade", "examples/inventory_group.json", "--out", str(out))
    assert graded.returncode == 0, graded.stderr
    result = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    transcript = out / "transcripts" / "inventory-average-empty.jsonl"
    transcript.parent.mkdir(exist_ok=True)
    transcript.write_text(DEEP + "\n")
    result["transcript"] = "transcripts/inventory-average-empty.jsonl"
    (out / "results.jsonl").write_text(json.dumps(result) + "\n")
    run = load_run(out)
    reading = run.read_transcript(run.result(result["group_id"]))
    assert reading.events is None
    assert "transcript damaged" in reading.note and ":1: nested deeper" in reading.note, reading.note
