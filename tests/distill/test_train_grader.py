"""The recipe in examples/train_grader/: TRL's SFTTrainer, assistant-only loss, on data distilled from a
scripted teacher, for a few CPU steps on a tiny in-memory Llama (no model hub)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from grader.distill.run import DistillConfig, distill
from grader.graders.llm.budgets import Budgets
from grader.servers.scripted import ScriptedServer, tiny_llama
from tests.conftest import REPO_ROOT
from tests.support.distill_support import teacher, write_inputs

torch = pytest.importorskip("torch", reason="the integrations extra is not installed")
pytest.importorskip("trl", reason="trl is not installed (pip install 'gagar[integrations]')")
from tokenizers import Regex  # noqa: E402
from tokenizers.pre_tokenizers import Split  # noqa: E402

PIECES = Split(Regex(r"\w+|[^\w\s]+|\s+"), behavior="isolated")

SECRET = "secret 1"  # the scripted teacher is right on 6 of its 16 samples under this secret


def recipe():
    spec = importlib.util.spec_from_file_location(
        "train_grader", REPO_ROOT / "examples/train_grader/train.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_model_and_tokenizer(texts: list[str]):
    """A one-layer Llama and a word-level tokenizer whose vocabulary covers `texts`, whitespace included
    (every character belongs to a token, as with a real byte-level tokenizer: the assistant mask is found
    through character offsets)."""
    words = {"[PAD]": 0, "[UNK]": 1, "[EOS]": 2}
    for text in texts:
        for word, _ in PIECES.pre_tokenize_str(text):
            words.setdefault(word, len(words))
    return tiny_llama(list(words), pre_tokenizer=PIECES, hidden_size=32)


def test_recipe_trains_on_assistant_tokens_only_and_the_loss_falls(tmp_path: Path) -> None:
    train_grader = recipe()
    inputs, reference, _ = write_inputs(tmp_path)
    out = tmp_path / "distilled"
    out.mkdir()
    (out / "secret").write_text(SECRET)
    with ScriptedServer(teacher) as server:
        budgets = Budgets(turns=6, retries=0, request_timeout=1.0, repairs=1)
        options = {"model": "scripted", "base_url": server.url, "sandbox": None, "budgets": budgets}
        manifest = distill([inputs], reference, options, out, DistillConfig(samples=8, eval_fraction=0))
    assert manifest["counts"]["kept"] == 6 and manifest["counts"]["rows"]["train"] == 6
    train = train_grader.load_sft(out / "sft.jsonl")
    template = train_grader.training_template("qwen2_5")
    rendered = []
    probe = tiny_model_and_tokenizer(["x"])[1]
    probe.chat_template = template
    for row in train:
        rendered.append(
            probe.apply_chat_template(row["messages"], tools=json.loads(row["tools"]), tokenize=False)
        )
    model, tokenizer = tiny_model_and_tokenizer(rendered)
    tokenizer.chat_template = template
    trainer = train_grader.build_trainer(
        model,
        tokenizer,
        train,
        tmp_path / "model",
        max_steps=12,
        learning_rate=3e-3,
        batch_size=2,
        max_length=4096,
        use_cpu=True,
        bf16=False,
    )
    # Only assistant tokens carry loss: the masked-in tokens spell exactly the assistant turns' output.
    for row, text in zip(trainer.train_dataset, rendered, strict=True):
        ids, mask = row["input_ids"], [label != -100 for label in row["labels"]]
        assert len(ids) == len(tokenizer(text)["input_ids"])  # nothing cut
        expected = "".join(re.findall(r"<\|im_start\|>assistant(.*?<\|im_end\|>\n)", text, flags=re.S))
        trained = "".join(tokenizer.convert_ids_to_tokens([t for t, m in zip(ids, mask, strict=True) if m]))
        assert trained == expected
        assert "tool_response" not in trained and "DATA" not in trained and "submit_ranking" in trained
    batch = trainer.data_collator([trainer.train_dataset[0]])
    assert batch["labels"].tolist() == [trainer.train_dataset[0]["labels"]]  # what the loss is taken over
    result = trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    print(f"recipe losses: {[round(x, 3) for x in losses]}")
    assert len(losses) == 12 and result.global_step == 12
    assert sum(losses[-3:]) / 3 < 0.9 * sum(losses[:3]) / 3 and losses[-1] < min(losses[:-1]), losses
