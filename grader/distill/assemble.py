"""The outputs of `gagar distill`, assembled from the run folder's records alone, in (group, sample) order:
`sft.jsonl`, `sft_eval.jsonl` (train/eval split by task), optionally OpenAI's format, and `manifest.json`.
The same records make the same files, so a resumed run writes exactly what an uninterrupted one does."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from grader.distill import sft
from grader.distill.augment import AugmentationRefused, relabel
from grader.distill.benchmarks import task_hash
from grader.distill.plan import DistillConfig, Plan
from grader.distill.records import read_record, record_path
from grader.errors import DistillError
from grader.graders.llm.tools import constrain_labels
from grader.util.atomic import write_text_atomic

__all__ = ["assemble"]


def _example_rows(
    record: dict[str, Any], tools: list[dict[str, Any]], augment: int, secret: str
) -> tuple[list[tuple[int, dict[str, Any]]], str | None]:
    """(copy, row) for a kept record: the transcript itself (copy 0), then its relabelled copies; and why
    no copies were made, when relabelling was refused."""
    # Each example carries the tools as its grading sent them: label arguments are enums of its own labels.
    contrast = [label for label, _ in record.get("contrast") or []]
    rows = [(0, sft.example(record["messages"], constrain_labels(tools, record["shown"], contrast)))]
    for copy in range(1, augment + 1):
        rng = random.Random(f"{secret}:{record['group_id']}:{record['sample']}:{copy}")
        try:
            messages, relabelling = relabel(record["messages"], record["shown"], contrast, rng)
        except AugmentationRefused as exc:
            return rows[:1], str(exc)
        served = constrain_labels(tools, relabelling.order, relabelling.contrast)
        rows.append((copy, sft.example(messages, served)))
    return rows, None


def assemble(
    work: Plan,
    out: Path,
    secret: str,
    config: DistillConfig,
    header: dict[str, Any],
    tools: list[dict[str, Any]],
    workspace_failures: dict[str, str],
) -> dict[str, Any]:
    """Write the outputs from the records alone, in (group, sample) order: same records, same files.

    Args:
        work: the plan.
        out: the output folder.
        secret: the run's secret (augmentation draws from it).
        config: the run's settings.
        header: the manifest's fixed part (teacher, fingerprints, settings).
        tools: the tool schemas the trained grader will be served with.
        workspace_failures: groups whose workspace could not be built, with the reason.

    Returns:
        The manifest (also written to `out/manifest.json`).

    Raises:
        DistillError: a record was damaged after this run wrote it (named; a rerun grades it again).
    """
    eval_tasks = sft.split_tasks([task_hash(g) for g in work.groups], config.eval_fraction)
    splits: dict[str, list[dict[str, Any]]] = {"train": [], "eval": []}
    seen: dict[str, str] = {}
    transcripts, groups = [], dict(sorted(work.left_out.items()))
    tokens = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    for group in sorted(work.groups, key=lambda g: g.group_id):
        gid = group.group_id
        split = "eval" if task_hash(group) in eval_tasks else "train"
        if gid in workspace_failures:
            groups[gid] = {"status": "failed", "reason": workspace_failures[gid]}
            continue
        records = []
        for sample in range(config.samples):
            path = record_path(out, gid, sample)
            record, problem = read_record(path, gid, sample)
            if problem:  # written by this run a moment ago: only something else could have damaged it
                raise DistillError(f"{path} was damaged while the run was writing ({problem}); run again")
            if record is not None:
                records.append(record)
        kept = 0
        for record in records:
            for key in tokens:
                tokens[key] += int(record.get("usage", {}).get(key, 0))
            entry = {
                "group": gid,
                "sample": record["sample"],
                "kept": record["status"] == "kept",
                "why": record["category"],
                "reason": record["reason"],
                "agreement": record.get("agreement"),
                "pairs": record.get("pairs"),
                "tokens": int(record.get("usage", {}).get("total_tokens", 0)),
                "tool_calls": int(record.get("usage", {}).get("tool_calls", 0)),
            }
            if entry["kept"]:
                rows = []
                made, refused = _example_rows(record, tools, config.augment, secret)
                if refused is not None:
                    entry["augmentation_refused"] = refused
                for copy, row in made:
                    key = sft.row_hash(row)
                    if key in seen:
                        if copy == 0:
                            entry.update(
                                kept=False, why="duplicate", reason=f"exact duplicate of {seen[key]}"
                            )
                        continue
                    seen[key] = f"{gid}/{record['sample']}" + (f" copy {copy}" if copy else "")
                    rows.append(row)
                if entry["kept"]:
                    kept += 1
                    entry.update(split=split, rows=len(rows))
                    splits[split].extend(rows)
            transcripts.append(entry)
        groups[gid] = {
            "status": "distilled",
            "split": split,
            "task": task_hash(group),
            "samples": len(records),
            "kept": kept,
        }
    files = {"train": "sft.jsonl", "eval": "sft_eval.jsonl"}
    for name, rows in splits.items():
        write_text_atomic(out / files[name], "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
        if config.openai:
            text = "".join(json.dumps(sft.openai_example(row), sort_keys=True) + "\n" for row in rows)
            write_text_atomic(out / f"openai_{name}.jsonl", text)
    why = [t["why"] for t in transcripts]
    manifest = {
        **header,
        "counts": {
            "groups": len(groups),
            "distilled": sum(g["status"] == "distilled" for g in groups.values()),
            "refused": sum(g["status"] == "refused" for g in groups.values()),
            "failed": sum(g["status"] == "failed" for g in groups.values()),
            "transcripts": len(transcripts),
            "kept": why.count("kept"),
            "dropped": {c: why.count(c) for c in ("agreement", "budget", "failure", "duplicate")},
            "keep_rate": round(why.count("kept") / len(why), 4) if why else None,
            "rows": {"train": len(splits["train"]), "eval": len(splits["eval"])},
        },
        "tokens": tokens,
        "groups": groups,
        "transcripts": transcripts,
    }
    write_text_atomic(out / "manifest.json", json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest
