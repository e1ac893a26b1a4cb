"""The SFT data `gagar distill` writes: loaded with `datasets`, rendered with a real chat template (TRL's
training template for Qwen 2.5), and its label-augmented copies replayed against the real workspace."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from grader.distill.augment import relabel
from grader.distill.run import DistillConfig, distill
from grader.graders.llm.agent import LLMGrader
from grader.graders.llm.tools import SUBMIT, Candidates, Markers, Toolbox, ToolError
from grader.servers.scripted import Reply, labels_in, read_every_diff_then_rank
from grader.workspace.workspace import open_workspace
from tests.support.distill_support import write_inputs

datasets = pytest.importorskip("datasets", reason="the integrations extra is not installed")
trl = pytest.importorskip("trl", reason="trl is not installed (pip install 'gagar[integrations]')")

SECRET = "sft secret"
RUN_TIMING = re.compile(r"(== [^\n]*?: (?:exit -?\d+|TIMED OUT)), \d+\.\ds")


def reviewer(request: dict[str, Any], n: int) -> Reply:
    """Always right: lists, diffs every candidate, reads, searches and runs a probe on every target."""
    labels = labels_in(request)
    reads = [
        ("read_file", {"target": labels[-1], "path": "pkg/core.py", "start_line": 1, "end_line": 3}),
        ("search", {"target": "base", "pattern": "def add"}),
        ("run", {"command": "python -c 'import pkg.core as c; print(c.add(2, 3))'"}),
        ("run", {"command": "cat notes.txt | head -1", "targets": [labels[1], labels[0]]}),
        ("run", {"command": "head -2 pkg/core.py; ls"}),
    ]
    return read_every_diff_then_rank(
        request, reads, lambda label, i, count: f"{label} ranks {i + 1} of {count}: smaller diff", 0.9
    )


@pytest.fixture(scope="module")
def distilled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list]:
    from grader.servers.scripted import ScriptedServer

    root = tmp_path_factory.mktemp("sft")
    inputs, reference, groups = write_inputs(root)
    out = root / "out"
    out.mkdir()
    (out / "secret").write_text(SECRET)
    with ScriptedServer(reviewer) as server:
        teacher = {"model": "scripted", "base_url": server.url, "sandbox": "local"}
        manifest = distill(
            [inputs], reference, teacher, out, DistillConfig(samples=2, augment=1, openai=True)
        )
    assert manifest["counts"]["kept"] == 4, manifest["transcripts"]
    return out, groups


def training_template() -> str:
    return (Path(trl.__file__).parent / "chat_templates" / "qwen2_5_training.jinja").read_text()


def tokenizer_with(template: str):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(WordLevel({"[PAD]": 0, "[UNK]": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="[PAD]", unk_token="[UNK]")
    tokenizer.chat_template = template
    return tokenizer


def test_rendered_examples_show_each_tool_call_and_result_once_intact(distilled) -> None:
    out, _ = distilled
    files = {"train": str(out / "sft.jsonl"), "eval": str(out / "sft_eval.jsonl")}
    splits = datasets.load_dataset("json", data_files=files)
    # 4 kept transcripts and one relabelled copy of each; two tasks, one on each side
    assert len(splits["train"]) == len(splits["eval"]) == 4
    tokenizer = tokenizer_with(training_template())
    for row in [*splits["train"], *splits["eval"]]:
        messages, tools = row["messages"], json.loads(row["tools"])
        assert [t["function"]["name"] for t in tools] == [
            "list_candidates",
            "diff",
            "read_file",
            "search",
            "run",
            SUBMIT,
        ]
        rendered = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
        calls = [c["function"] for m in messages for c in m.get("tool_calls") or []]
        assert calls[-1]["name"] == SUBMIT and isinstance(calls[-1]["arguments"]["ranking"], list)
        for call in calls:
            assert isinstance(call["arguments"], dict)  # an object, so the template encodes it once
            text = (
                '{"name": "'
                + call["name"]
                + '", "arguments": '
                + json.dumps(call["arguments"], ensure_ascii=False)
                + "}"
            )
            same = sum(c == call for c in calls)
            assert rendered.count(text) == same, text
        results = [m["content"] for m in messages if m["role"] == "tool"]
        assert len(results) == 1 + 3 + 5  # list, three diffs, read, search, three runs
        for content in results:
            assert rendered.count(f"<tool_response>\n{content}\n</tool_response>") == results.count(content)
        assert messages[0]["role"] == "system" and messages[0]["content"] in rendered


def test_openai_format_carries_arguments_as_json_strings(distilled) -> None:
    out, _ = distilled
    sft_rows = [json.loads(line) for line in (out / "sft.jsonl").open()]
    openai_rows = [json.loads(line) for line in (out / "openai_train.jsonl").open()]
    assert len(openai_rows) == len(sft_rows)
    for ours, theirs in zip(sft_rows, openai_rows, strict=True):
        assert theirs["tools"] == json.loads(ours["tools"])
        for mine, other in zip(ours["messages"], theirs["messages"], strict=True):
            for a, b in zip(mine.get("tool_calls") or [], other.get("tool_calls") or [], strict=True):
                assert json.loads(b["function"]["arguments"]) == a["function"]["arguments"]
            if mine["role"] == "tool":
                assert other["content"] == mine["content"] and "name" not in other


def replay(
    messages: list[dict], candidates: Candidates, view, seed: int, group_id: str
) -> list[tuple[str, str]]:
    """Run a conversation's tool calls against the workspace under `candidates`: (expected, got) pairs."""
    grader = LLMGrader("replay", sandbox="local", secret=SECRET, seed=0)
    toolbox = Toolbox(
        view, candidates, grader.prompts.tools, sandbox_opener=grader._sandbox_opener(view),
        markers=Markers(f"{SECRET}:{group_id}:{seed}"),
    )  # fmt: skip
    try:
        opening = grader._opening(toolbox, candidates.order, view, native=True)
        pairs = [(m["content"], o["content"]) for m, o in zip(messages[:2], opening, strict=True)]
        results = iter(m for m in messages if m["role"] == "tool")
        for message in messages:
            for call in message.get("tool_calls") or []:
                function = call["function"]
                if function["name"] == SUBMIT:
                    continue
                try:
                    got = toolbox.call(function["name"], function["arguments"])
                except ToolError as exc:
                    got = f"error: {exc}"
                pairs.append((next(results)["content"], got))
        return pairs
    finally:
        toolbox.close()


def test_relabelled_transcript_replays_against_the_workspace(distilled) -> None:
    out, groups = distilled
    record = json.loads((out / "records" / "add-1" / "0.json").read_text())
    assert record["status"] == "kept"
    with open_workspace(groups[0]) as workspace:
        view = workspace.view()
        # The original replays under its own labels (what makes the comparison below mean something).
        original = Candidates(order=record["shown"], members=record["labels"], seed=record["seed"])
        for expected, got in replay(record["messages"], original, view, record["seed"], "add-1"):
            assert RUN_TIMING.sub(r"\1", expected) == RUN_TIMING.sub(r"\1", got)
        for attempt in range(3):
            messages, relabelling = relabel(record["messages"], record["shown"], [], random.Random(attempt))
            assert set(relabelling.order).isdisjoint(record["shown"])
            members = {relabelling.mapping[old]: ids for old, ids in record["labels"].items()}
            candidates = Candidates(order=relabelling.order, members=members, seed=record["seed"])
            compared = replay(messages, candidates, view, record["seed"], "add-1")
            assert len(compared) == 2 + 9
            for expected, got in compared:
                assert RUN_TIMING.sub(r"\1", expected) == RUN_TIMING.sub(r"\1", got)
            text = json.dumps(messages)
            assert not any(old in text for old in record["shown"])  # renamed everywhere
            submit = messages[-1]["tool_calls"][-1]["function"]["arguments"]
            submitted = [members[label][0] for tier in submit["ranking"] for label in tier]
            assert submitted == [tid for tier in record["ranking"] for tid in tier]  # same verdict
            assert set(submit["reasons"]) == set(relabelling.order)
        assert relabelling.order != [relabelling.mapping[old] for old in record["shown"]] or attempt < 2


def test_transcripts_that_cannot_be_examples_are_named() -> None:
    from grader.distill.sft import NotAnExample, messages_from_events

    opening = [
        {"type": "message", "role": "system", "content": "s"},
        {"type": "message", "role": "user", "content": "u"},
    ]
    broken = {"id": "c1", "name": "diff", "arguments": '{"candidate": "C-'}
    events = [*opening, {"type": "message", "role": "assistant", "content": "", "tool_calls": [broken]}]
    with pytest.raises(NotAnExample, match="arguments of a diff call are not JSON"):
        messages_from_events([*events, {"type": "submitted"}])
    with pytest.raises(NotAnExample, match="without a valid submission"):
        messages_from_events(opening)
    # Calls made in the submitting turn after the submission were never run: they are left out.
    last = [{"id": "c2", "name": SUBMIT, "arguments": "{}"}, {"id": "c3", "name": "diff", "arguments": "{}"}]
    messages = messages_from_events(
        [*opening, {"type": "message", "role": "assistant", "tool_calls": last}, {"type": "submitted"}]
    )
    assert [c["function"]["name"] for c in messages[-1]["tool_calls"]] == [SUBMIT]


def test_relabelling_refuses_candidate_text_that_holds_a_label() -> None:
    from grader.distill.augment import AugmentationRefused

    prompt = "Candidates (labels are random and their order means nothing): C-abcd, C-efgh"
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "diff", "arguments": {"candidate": "C-abcd"}},
    }
    result = "<<<DATA 0a>>>\n+# see C-efgh\n<<<END 0a>>>"
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": prompt},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "diff", "content": result},
    ]
    with pytest.raises(AugmentationRefused, match="C-efgh"):
        relabel(messages, ["C-abcd", "C-efgh"], [], random.Random(0))
    messages[-1]["content"] = "<<<DATA 0a>>>\n+# fine\n<<<END 0a>>>"
    rewritten, relabelling = relabel(messages, ["C-abcd", "C-efgh"], [], random.Random(0))
    assert rewritten[2]["tool_calls"][0]["function"]["arguments"] == {
        "candidate": relabelling.mapping["C-abcd"]
    }
    assert rewritten[1]["content"].endswith(", ".join(relabelling.order))


def test_relabelling_with_contrast_candidates_replays(tmp_path: Path) -> None:
    from grader.servers.scripted import ScriptedServer

    inputs, reference, groups = write_inputs(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "secret").write_text(SECRET)
    with ScriptedServer(reviewer) as server:
        teacher = {"model": "scripted", "base_url": server.url, "sandbox": "local", "show_failing": True}
        distill([inputs], reference, teacher, out, DistillConfig(samples=1, eval_fraction=0))
    record = json.loads((out / "records" / "add-1" / "0.json").read_text())
    assert record["status"] == "kept" and [tid for _, tid in record["contrast"]] == ["broken"]
    contrast = [label for label, _ in record["contrast"]]
    listing = next(m["content"] for m in record["messages"] if m.get("name") == "list_candidates")
    assert "FAILED the tests" in listing
    with open_workspace(groups[0]) as workspace:
        view = workspace.view()
        messages, relabelling = relabel(record["messages"], record["shown"], contrast, random.Random(5))
        members = {relabelling.mapping[old]: ids for old, ids in record["labels"].items()}
        failing = {relabelling.mapping[old]: tid for old, tid in record["contrast"]}
        candidates = Candidates(relabelling.order, members, failing, seed=record["seed"])
        for expected, got in replay(messages, candidates, view, record["seed"], "add-1"):
            assert RUN_TIMING.sub(r"\1", expected) == RUN_TIMING.sub(r"\1", got)
        assert relabelling.mapping[contrast[0]] in messages[1]["content"]  # the contrast line, renamed
