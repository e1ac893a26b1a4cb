"""TRL: GagarGRPOTrainer on a tiny random model, one generation step on the CPU.

Two prompts x num_generations=4 completions; a stand-in test reward (a fixed pass pattern, so both groups
are mixed) and a weights function that ranks the passing completions of each group by the length of their
text, shortest first. Prints TRL's own advantages (its logged column) and the redistributed ones the loss
will see. Run: python examples/integrations/trl_grpo.py (needs trl and torch; nothing is downloaded: the
model and tokenizer are built in memory).
"""

from __future__ import annotations

import tempfile
from typing import Any

import numpy as np
from datasets import Dataset
from trl import GRPOConfig

from grader.integrations.trl import GagarGRPOTrainer
from grader.redistribute import rank_to_weights
from grader.testing import tiny_llama

PASS_PATTERN = [1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]


def passes_tests(completions: list[Any], **kwargs: Any) -> list[float]:
    return PASS_PATTERN[: len(completions)]


seen_completions: list[str] = []


def shortest_first(group_ids: np.ndarray, passed: np.ndarray, batch: dict[str, list[Any]]) -> np.ndarray:
    """A toy grader over the gathered batch: within each group, shorter passing completions rank higher."""
    seen_completions[:] = batch["completions"]
    weights = np.ones(len(passed))
    for group in np.unique(group_ids):
        rows = [i for i in np.flatnonzero(group_ids == group) if passed[i]]
        ranking = [[str(i)] for i in sorted(rows, key=lambda i: (len(batch["completions"][i]), i))]
        for trajectory, weight in rank_to_weights(ranking).items():
            weights[int(trajectory)] = weight
    return weights


words = ["[PAD]", "[UNK]", "[EOS]", "fix", "the", "bug", "in", "stock", "py", "return", "total"]
model, tokenizer = tiny_llama(words)
prompts = ["fix the bug in stock py", "return the total"]
with tempfile.TemporaryDirectory() as out:
    trainer = GagarGRPOTrainer(
        model=model,
        reward_funcs=[passes_tests],
        args=GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=8,
            num_generations=4,
            max_completion_length=6,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
        ),
        train_dataset=Dataset.from_list([{"prompt": p} for p in prompts] * 4),
        processing_class=tokenizer,
        weights_fn=shortest_first,
    )
    trainer.model.train()
    output = trainer._generate_and_score_completions([{"prompt": p} for p in prompts for _ in range(4)])
    before = list(trainer._logs["advantages"])
    after = output["advantages"].tolist()
    print(f"advantages: shape {tuple(output['advantages'].shape)} (per-process batch), num_generations=4")
    print("sample group passed text_length  before   after")
    for i in range(8):
        passed = PASS_PATTERN[i] >= 1
        length = len(seen_completions[i])
        print(f"{i:6} {i // 4:5} {passed!s:6} {length:11}  {before[i]:+.4f} {after[i]:+.4f}")
    print("groups left unchanged:", trainer.gagar_unchanged)
