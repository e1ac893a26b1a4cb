"""What a `gagar distill` run will do: its settings (`DistillConfig`), and which groups it distils and which
(group, sample) are still to grade (`plan`, read from the run folder's records)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grader.distill.benchmarks import Benchmarks
from grader.distill.records import move_aside, read_record, record_path
from grader.groups.formats import LoadFailure, load_groups
from grader.groups.models import Group
from grader.ranking.references import Reference

__all__ = ["DistillConfig", "Plan", "plan"]


@dataclass
class DistillConfig:
    """How a distillation run samples, filters and writes."""

    samples: int = 4
    """Teacher gradings per group, each under fresh labels and candidate order."""
    min_agreement: float = field(default=1.0, metadata={"cli": "--min-agreement"})
    """Agreement with the reference (pairwise credit over its pairs, ties half) to keep a transcript."""
    augment: int = 0
    """Relabelled copies of each kept transcript (fresh labels, fresh order), added to its split."""
    eval_fraction: float = 0.1
    """Share of tasks held out in sft_eval.jsonl (no task on both sides)."""
    openai: bool = False
    """Also write openai_train.jsonl and openai_eval.jsonl (OpenAI's fine-tuning format)."""
    workers: int = 4
    """Gradings in flight at once (LLM calls, sandboxes and builds stay within the resources' bounds)."""

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError("--samples must be at least 1")
        if not 0.0 <= self.min_agreement <= 1.0:
            raise ValueError("--min-agreement must be in [0, 1]")
        if not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError("--eval-fraction must be in [0, 1)")
        if self.augment < 0 or self.workers < 1:
            raise ValueError("--augment must be >= 0 and --workers >= 1")


@dataclass
class Plan:
    """What a run will do: the groups it distils and why the others are left out."""

    groups: list[Group]
    references: dict[str, Reference]
    left_out: dict[str, dict[str, str]] = field(default_factory=dict)  # group id -> status, reason
    pending: list[tuple[Group, int]] = field(default_factory=list)  # (group, sample) not yet recorded
    damaged: list[str] = field(default_factory=list)  # records found damaged: moved aside, graded again


def plan(
    inputs: list[Path],
    references: dict[str, Reference],
    benchmarks: Benchmarks,
    out: Path,
    samples: int,
) -> Plan:
    """Decide which groups are distilled and which (group, sample) are still to grade.

    Args:
        inputs: group files.
        references: group id -> reference.
        benchmarks: the benchmarks whose groups are refused.
        out: the output folder (its records say what is done).
        samples: gradings per group.

    Returns:
        The plan. A group is left out, with the reason, when it is not valid, has no reference, belongs to
        a benchmark, or its reference names trajectories it does not have (named). A damaged record (cut,
        not JSON, or lacking what the outputs are built from) is moved aside (`move_aside`), named in
        `damaged`, and its sample is pending again.

    Raises:
        OSError: a record cannot be read or moved.
    """
    chosen = Plan(groups=[], references=references)
    seen: set[str] = set()
    for item in load_groups(inputs):
        if isinstance(item, LoadFailure):
            chosen.left_out[f"{item.source}"] = {"status": "failed", "reason": f"invalid group: {item}"}
            continue
        gid = item.group_id
        if gid in seen:
            chosen.left_out[gid] = {"status": "failed", "reason": "group id given twice; the first is used"}
            continue
        seen.add(gid)
        refusal = benchmarks.refusal(item)
        reference = references.get(gid)
        known = {t.id for t in item.trajectories}
        if refusal is not None:
            chosen.left_out[gid] = {"status": "refused", "reason": refusal}
        elif reference is None:
            chosen.left_out[gid] = {"status": "refused", "reason": "no reference for this group"}
        elif reference.ids() - known:
            unknown = ", ".join(sorted(reference.ids() - known))
            chosen.left_out[gid] = {
                "status": "failed",
                "reason": f"the reference names trajectories the group does not have: {unknown}",
            }
        else:
            chosen.groups.append(item)
    for sample in range(
        samples
    ):  # sample-major: the workers spread over groups (one grading per group at once)
        for group in chosen.groups:
            path = record_path(out, group.group_id, sample)
            record, problem = read_record(path, group.group_id, sample)
            if problem:
                moved = move_aside(path)
                chosen.damaged.append(f"{path} is damaged ({problem}): moved to {moved.name}; graded again")
            if record is None:
                chosen.pending.append((group, sample))
    return chosen
