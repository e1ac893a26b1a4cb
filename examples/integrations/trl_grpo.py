"""TRL: GagarGRPOTrainer given a grader and a task mapping, one generation step on the CPU.

Two prompts x num_generations=4 completions from a tiny random model (built in memory, nothing downloaded).
The model cannot write patches, so completion k of a prompt stands for candidate k of the bundled example
(examples/inventory_group.json) that the dataset row lists, with its test outcome as the reward (a stand-in
for running the tests). The real heuristic grader ranks each group's passing patches during the step; the
trainer prints TRL's own advantages (its logged column) and the redistributed ones the loss will see, and
the grader's metrics. Run: python examples/integrations/trl_grpo.py (needs trl and torch).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from datasets import Dataset
from trl import GRPOConfig

from grader.graders.heuristic import HeuristicGrader
from grader.groups.formats import load_group_file
from grader.integrations.batch import BatchGrader
from grader.integrations.rows import RowMapping
from grader.integrations.trl import GagarGRPOTrainer
from grader.servers.scripted import tiny_llama

G = 4
(example,) = load_group_file(Path(__file__).resolve().parents[1] / "inventory_group.json")
candidates = {
    "fix the bug in stock py": ["clean", "edits-tests", "wrong-value", "leftover-script"],
    "return the total": ["reformats-report", "clean-respaced", "gave-up", "wrong-value"],
}
# One dataset row per prompt: the task (repo, base commit, statement) and what each completion stands for.
dataset_rows = [
    {
        "prompt": prompt,
        "patches": [example.trajectory(t).patch for t in ids],
        "passes": [float(bool(example.trajectory(t).passed)) for t in ids],
        "repo": example.task.repo,
        "base_commit": example.task.base_commit,
        "statement": example.task.statement,
    }
    for prompt, ids in candidates.items()
]


def passes_tests(completions: list[Any], passes: list[list[float]], **kwargs: Any) -> list[float]:
    """Completion k of a group passed iff its candidate did (TRL keeps a prompt's completions together)."""
    return [passes[i][i % G] for i in range(len(completions))]


# Where the grader finds each row's patch: the candidate the completion stands for. The task fields (repo,
# base_commit, statement) are dataset columns, read by the default mapping's names.
mapping = RowMapping(patch=lambda row: row["patches"][int(row["trajectory_id"])])
grader = BatchGrader(HeuristicGrader(), mapping, workers=2)
words = ["[PAD]", "[UNK]", "[EOS]", "fix", "the", "bug", "in", "stock", "py", "return", "total"]
model, tokenizer = tiny_llama(words)
with tempfile.TemporaryDirectory() as out:
    trainer = GagarGRPOTrainer(
        model=model,
        reward_funcs=[passes_tests],
        args=GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=8,
            num_generations=G,
            max_completion_length=6,
            report_to="none",
            use_cpu=True,
            save_strategy="no",
        ),
        train_dataset=Dataset.from_list(dataset_rows * 4),
        processing_class=tokenizer,
        grader=grader,
        deadline=60.0,
    )
    trainer.model.train()
    output = trainer._generate_and_score_completions([row for row in dataset_rows for _ in range(G)])
    before = list(trainer._logs["advantages"])
    after = output["advantages"].tolist()
    step = trainer.gagar_step
    assert step is not None
    lengths = output["completion_mask"].sum(1).tolist()
    print(f"preserve={trainer.gagar_preserve} (loss_type={trainer.loss_type}); advantages per completion:")
    print("sample group candidate         tokens weight  before   after")
    for i in range(2 * G):
        candidate = list(candidates.values())[i // G][i % G]
        print(
            f"{i:6} {i // G:5} {candidate:17} {lengths[i]:6} {step.weights[i]:6.3f}  "
            f"{before[i]:+.4f} {after[i]:+.4f}"
        )
    print("metrics:", {k: round(v, 3) for k, v in step.metrics.items()})
grader.close()
