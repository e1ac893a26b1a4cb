"""TRL adapter: against the real GRPOTrainer on a tiny random model (CPU); groups spanning processes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the integrations extra is not installed")
pytest.importorskip("trl", reason="trl is not installed (pip install 'gagar[integrations]')")
from grader.integrations.trl import Collectives, GagarGRPOTrainer, redistribute_gathered  # noqa: E402
from grader.redistribution.redistribute import redistribute_batch  # noqa: E402
from grader.servers.scripted import tiny_llama  # noqa: E402

G = 4  # num_generations


def simulate(full: Any, rewards: Any, n_processes: int, weights_fn: Callable[..., Any]) -> list[Any]:
    """Run redistribute_gathered as each of n_processes would, with collectives over the full batch."""
    n_local = full.shape[0] // n_processes
    local = lambda p: slice(p * n_local, (p + 1) * n_local)  # noqa: E731
    completions = [f"completion {i}" for i in range(full.shape[0])]
    main_weights: list[Any] = []
    outputs = []
    for p in range(n_processes):

        def broadcast(value: Any, p: int = p) -> Any:
            if p == 0:
                main_weights.append(value)
            return main_weights[0]

        collectives = Collectives(
            process_index=p,
            is_main_process=p == 0,
            gather=lambda tensor: full,
            gather_object=lambda values: completions if values[0].startswith("completion") else values,
            broadcast_object=broadcast,
        )
        new, _ = redistribute_gathered(
            full[local(p)], rewards, G, {"completions": completions[local(p)]}, weights_fn, collectives
        )
        outputs.append(new)
    return outputs


def test_group_spanning_two_processes_is_weighted_as_a_whole() -> None:
    # 3 groups of 4 over 2 processes with 6 samples each: group 1 is samples 4-7, split 4-5 | 6-7.
    passed = np.array([1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 0], dtype=bool)
    rewards = torch.tensor(passed, dtype=torch.float32)[:, None]
    grouped = rewards.view(-1, G)
    full = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).reshape(-1)
    weights = np.array([1.0, 1, 0.5, 1, 1.0, 0.5, 1, 0.75, 1.0, 0.6, 1, 1])
    calls = []

    def weights_fn(group_ids: np.ndarray, flags: np.ndarray, batch: dict[str, list[str]]) -> np.ndarray:
        calls.append(len(batch["completions"]))
        return weights

    outputs = simulate(full, rewards, 2, weights_fn)
    assert calls == [12]  # once, on the main process, over the whole gathered batch
    expected, _ = redistribute_batch(full.numpy(), np.arange(12) // G, passed, weights)
    np.testing.assert_allclose(torch.cat(outputs).numpy(), expected, rtol=1e-6)
    # Weighting each process's part of group 1 on its own would have kept each part's sum instead.
    passing = [4, 5, 7]
    assert torch.cat(outputs)[passing].sum().item() == pytest.approx(full[passing].sum().item(), rel=1e-6)
    assert outputs[0][5] < outputs[1][1] < outputs[0][4]
    uniform = simulate(full, rewards, 2, lambda g, p, b: np.ones(12))
    assert torch.equal(torch.cat(uniform), full)


# ------------------------------------------------------------------------------------------
# The real GRPOTrainer
# ------------------------------------------------------------------------------------------

PASS_PATTERN = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0]


def passes_tests(completions: list[Any], **kwargs: Any) -> list[float]:
    """A stand-in for test execution: a fixed pass pattern, so both groups are mixed."""
    return PASS_PATTERN[: len(completions)]


def tiny_trainer(
    tmp_path: Path,
    weights_fn: Callable[..., Any] | None = None,
    preserve: str | None = "sequence",
    reward: Callable[..., list[float]] = passes_tests,
    dataset_rows: list[dict[str, Any]] | None = None,
    **gagar: Any,
) -> GagarGRPOTrainer:
    from datasets import Dataset
    from trl import GRPOConfig

    words = ["[PAD]", "[UNK]", "[EOS]", "fix", "the", "bug", "in", "stock", "py", "return", "total"]
    model, tokenizer = tiny_llama(words)
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=G,
        max_completion_length=4,
        max_steps=1,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
    )
    rows = dataset_rows or [{"prompt": "fix the bug in stock py"}, {"prompt": "return the total"}]
    return GagarGRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=Dataset.from_list(rows * 4),
        processing_class=tokenizer,
        weights_fn=weights_fn,
        preserve=preserve,
        **gagar,
    )


@pytest.fixture
def batch() -> list[dict[str, str]]:
    return [{"prompt": p} for p in ["fix the bug in stock py"] * G + ["return the total"] * G]


def test_real_trainer_uniform_weights_give_trls_advantages(
    tmp_path: Path, batch: list[dict[str, str]]
) -> None:
    seen: list[dict[str, Any]] = []

    def weights_fn(group_ids: np.ndarray, passed: np.ndarray, gathered: dict[str, list[Any]]) -> np.ndarray:
        seen.append(
            {"groups": group_ids.tolist(), "passed": passed.tolist(), "n": len(gathered["completions"])}
        )
        return np.ones(len(passed))

    trainer = tiny_trainer(tmp_path, weights_fn)
    trainer.model.train()
    output = trainer._generate_and_score_completions(batch)
    trls_own = torch.tensor(list(trainer._logs["advantages"]), dtype=output["advantages"].dtype)
    assert torch.equal(output["advantages"], trls_own)
    assert seen == [{"groups": [0] * 4 + [1] * 4, "passed": [p >= 1 for p in PASS_PATTERN], "n": 8}]


def test_real_trainer_weights_redistribute(tmp_path: Path, batch: list[dict[str, str]]) -> None:
    weights = np.array([1.0, 0.5, 1.0, 0.75, 1.0, 1.0, 1.0, 1.0])
    trainer = tiny_trainer(tmp_path, lambda g, p, b: weights)
    trainer.model.train()
    output = trainer._generate_and_score_completions(batch)
    trls_own = np.array(list(trainer._logs["advantages"]))
    expected, reasons = redistribute_batch(trls_own, np.arange(8) // G, np.array(PASS_PATTERN) >= 1, weights)
    np.testing.assert_allclose(output["advantages"].numpy(), expected, rtol=1e-6)
    assert output["advantages"][1] < output["advantages"][3] < output["advantages"][0]
    assert trainer.gagar_unchanged == reasons == {1: "uniform weights"}
    # And a whole training step runs through the subclass.
    trainer.train()


# ------------------------------------------------------------------------------------------
# The real GRPOTrainer grading during the step, with the real heuristic grader
# ------------------------------------------------------------------------------------------

# The tiny random model cannot write patches: completion k of a prompt stands for candidate k of the bundled
# example, which the dataset row lists with the candidates' test outcomes (a stand-in for running them).
CANDIDATES = {
    "fix the bug in stock py": ["clean", "edits-tests", "wrong-value", "leftover-script"],
    "return the total": ["reformats-report", "clean-respaced", "gave-up", "wrong-value"],
}


def example_rows() -> list[dict[str, Any]]:
    from grader.groups.formats import load_group_file
    from tests.conftest import EXAMPLE_GROUP

    (group,) = load_group_file(EXAMPLE_GROUP)
    rows = []
    for prompt, ids in CANDIDATES.items():
        rows.append(
            {
                "prompt": prompt,
                "patches": [group.trajectory(t).patch for t in ids],
                "passes": [float(bool(group.trajectory(t).passed)) for t in ids],
                "candidates": ids,
                "repo": group.task.repo,
                "base_commit": group.task.base_commit,
                "statement": group.task.statement,
            }
        )
    return rows


def candidate_passes(completions: list[Any], passes: list[list[float]], **kwargs: Any) -> list[float]:
    """The k-th completion of a prompt passed iff the example's k-th candidate did (groups are contiguous)."""
    return [passes[i][i % G] for i in range(len(completions))]


def test_real_trainer_grades_real_patches_during_the_step(tmp_path: Path) -> None:
    from grader.graders.heuristic import HeuristicGrader
    from grader.groups.formats import load_group_file
    from grader.integrations.batch import BatchGrader
    from grader.integrations.rows import RowMapping
    from grader.pipeline import grade_group_sync
    from tests.conftest import EXAMPLE_GROUP

    mapping = RowMapping(patch=lambda row: row["patches"][int(row["trajectory_id"])])
    grader = BatchGrader(HeuristicGrader(), mapping, workers=2)
    rows = example_rows()
    trainer = tiny_trainer(
        tmp_path, preserve=None, reward=candidate_passes, dataset_rows=rows, grader=grader, deadline=60
    )
    assert trainer.gagar_preserve == "token"  # TRL's default loss, dapo, is a token mean
    trainer.model.train()
    batch = [row for row in example_rows() for _ in range(G)]
    output = trainer._generate_and_score_completions(batch)
    before = np.array(list(trainer._logs["advantages"]))
    after = output["advantages"].numpy()
    step = trainer.gagar_step
    assert step is not None and step.outcomes == ["graded"] * 8
    # The weights are the real heuristic grader's ranking of each group's candidates.
    (example,) = load_group_file(EXAMPLE_GROUP)
    ids = [t for prompt in CANDIDATES for t in CANDIDATES[prompt]]
    for g, prompt in enumerate(CANDIDATES):
        sub = example.model_copy(update={"trajectories": [example.trajectory(t) for t in CANDIDATES[prompt]]})
        expected = grade_group_sync(sub, HeuristicGrader()).weights
        for k, t in enumerate(CANDIDATES[prompt]):
            assert step.weights[g * G + k] == expected.get(t, 1.0)
    at = {t: i for i, t in enumerate(ids) if i < 4}
    assert after[at["clean"]] > after[at["leftover-script"]] > after[at["edits-tests"]]
    assert before[at["clean"]] == before[at["leftover-script"]] == before[at["edits-tests"]]
    failing = [i for i, t in enumerate(ids) if t in ("wrong-value", "gave-up")]
    np.testing.assert_array_equal(after[failing], before[failing])
    # Token preservation: the token-weighted advantage sum of each group's passing completions is kept.
    lengths = output["completion_mask"].sum(1).numpy()
    for g in range(2):
        rows = [i for i in range(g * G, (g + 1) * G) if i not in failing]
        assert (after[rows] * lengths[rows]).sum() == pytest.approx((before[rows] * lengths[rows]).sum())
    assert trainer._metrics["train"]["gagar/graded"] == [1.0]
    assert trainer._metrics["train"]["gagar/waited"][0] < 60
    print("advantages before", np.round(before, 4).tolist(), "after", np.round(after, 4).tolist())
    trainer.train()  # and a whole training step runs, grading inside it
    grader.close()


def test_trainer_needs_exactly_one_source_of_weights(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="exactly one of grader or weights_fn"):
        tiny_trainer(tmp_path, weights_fn=None)


def test_real_trainer_waits_no_longer_than_the_deadline(tmp_path: Path) -> None:
    import time

    from grader.graders.heuristic import HeuristicGrader
    from grader.integrations.batch import BatchGrader
    from grader.integrations.rows import RowMapping

    class Slow(HeuristicGrader):
        def grade(self, view):  # type: ignore[no-untyped-def]
            time.sleep(5)
            return super().grade(view)

    grader = BatchGrader(Slow(), RowMapping(patch=lambda row: row["patches"][int(row["trajectory_id"])]))
    trainer = tiny_trainer(
        tmp_path, reward=candidate_passes, dataset_rows=example_rows(), grader=grader, deadline=0.5
    )
    trainer.model.train()
    started = time.monotonic()
    output = trainer._generate_and_score_completions([row for row in example_rows() for _ in range(G)])
    assert time.monotonic() - started < 4  # the step did not wait for the 5 s grading
    trls_own = torch.tensor(list(trainer._logs["advantages"]), dtype=output["advantages"].dtype)
    assert torch.equal(output["advantages"], trls_own)  # late groups keep TRL's advantages
    assert trainer._metrics["train"]["gagar/late"] == [1.0]
    assert 0.5 <= trainer._metrics["train"]["gagar/waited"][0] < 1.0
