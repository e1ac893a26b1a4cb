"""`gagar eval` and `gagar degrade`: argument parsing and printing; the work is in harness and degrade.

`register(subparsers)` adds both commands to gagar's parser; `python -m grader.evaluation.cli` runs them on
their own.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from grader.cache import CachedGrader
from grader.cli_options import GradingArguments, add_grading_arguments, grading_from_args
from grader.evaluation import degrade as degrading
from grader.evaluation import harness
from grader.evaluation.consensus import ConsensusGrader
from grader.formats import check_inputs, load_groups
from grader.graders import get_grader
from grader.graders.base import Grader
from grader.models import Group
from grader.pipeline import write_results


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def grader_factory(args: argparse.Namespace, grading: GradingArguments) -> harness.GraderFactory:
    """`make_grader(k)`: the grader the options describe, the k-th time. For a grader with a seed the seed
    moves with k (seed + k), so every grading shows the candidates under other labels in another order."""
    options = dict(grading.grader_options)
    if "seed" not in options:
        return lambda k: get_grader(grading.grader, **options)
    seed = options.pop("seed")
    return lambda k: get_grader(
        grading.grader, **options, seed=None if seed is None else seed + k
    )  # a None seed is drawn at random per grading, and recorded


def _grader(args: argparse.Namespace, make_grader: harness.GraderFactory) -> Grader:
    grader = ConsensusGrader(make_grader, args.consensus) if args.consensus > 1 else make_grader(0)
    return CachedGrader(grader, args.cache) if args.cache else grader


def cmd_eval(args: argparse.Namespace) -> int:
    console = Console()
    inputs = check_inputs(args.inputs)
    grading = grading_from_args(args, transcript_dir=args.out / "transcripts")
    references = harness.load_reference(args.reference)
    items = load_groups(inputs, pass_threshold=args.pass_threshold)
    make_grader = grader_factory(args, grading)
    options = grading.options
    evaluation, results = harness.evaluate(
        items, references, _grader(args, make_grader), options, workers=args.workers
    )
    args.out.mkdir(parents=True, exist_ok=True)
    write_results(results, args.out)
    report = {"consensus": args.consensus, **evaluation.as_dict()}
    console.print(score_table(evaluation))
    kinds = evaluation.by_kind()
    if kinds:
        console.print(kind_table(kinds))
    if args.consistency:
        # The single grader's consistency, also under --consensus: it is what the consensus must make up for.
        scored = [item for item in items if isinstance(item, Group) and item.group_id in references]
        groups = harness.consistency(scored, make_grader, args.consistency, options)
        report["consistency"] = {"k": args.consistency, **harness.consistency_summary(groups)}
        console.print(consistency_table(report["consistency"]))
    (args.out / "eval.json").write_text(
        json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8"
    )
    for gid in evaluation.missing:
        console.print(f"[yellow]no group {gid!r} in the input[/]", highlight=False)
    console.print(f"-> {args.out / 'eval.json'}, {args.out / 'results.jsonl'}", highlight=False)
    failed = evaluation.overall()["failed"]
    return 1 if failed or evaluation.missing else 0


def score_table(evaluation: harness.Evaluation) -> Table:
    table = Table(title=f"grader {evaluation.grader}", show_edge=False, pad_edge=False)
    columns = ("group", "status", "pairs", "pairwise", "tau", "top-1", "inversions", "tokens", "seconds")
    for column in columns:
        left = column in ("group", "status")
        table.add_column(column, justify="left" if left else "right", no_wrap=column == "group")

    def row(name: str, status: str, figures: dict[str, Any]) -> list[str]:
        return [
            name,
            status,
            str(figures["scored_pairs"]),
            _fmt(figures["pairwise_accuracy"]),
            _fmt(figures["kendall_tau"], signed=True),
            _fmt(figures["top1_accuracy"]),
            _fmt(figures["inversions"]),
            f"{figures['tokens']:,}",
            f"{figures['seconds']:.2f}",
        ]

    for g in evaluation.groups:
        table.add_row(*row(g.group_id, g.status, g.__dict__))
    overall = evaluation.overall()
    if len(evaluation.groups) > 1:
        table.add_row(
            *row("overall", f"{overall['graded']}/{overall['groups']} graded", overall), style="bold"
        )
    return table


def kind_table(kinds: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="by degradation kind", show_edge=False, pad_edge=False)
    for column in ("kind", "severity", "pairs", "pairwise"):
        table.add_column(column, justify="left" if column == "kind" else "right")
    for kind, figures in sorted(
        kinds.items(), key=lambda item: (degrading.SEVERITY.get(item[0], 0), item[0])
    ):
        severity = degrading.SEVERITY.get(kind)
        table.add_row(
            kind, str(severity or "-"), str(figures["scored_pairs"]), _fmt(figures["pairwise_accuracy"])
        )
    return table


def consistency_table(summary: dict[str, Any]) -> Table:
    table = Table(title=f"consistency over {summary['k']} orders", show_edge=False, pad_edge=False)
    for column in ("group", "graded", "agreement", "first shown on top", "last shown on top", "chance"):
        table.add_column(column, justify="left" if column == "group" else "right", no_wrap=column == "group")
    for gid, g in summary["groups"].items():
        table.add_row(
            gid,
            f"{g['gradings']}/{g['k']}",
            _fmt(g["agreement"], signed=True),
            _fmt(g["first_ranked_first"]),
            _fmt(g["last_ranked_first"]),
            _fmt(g["chance"]),
        )
    if len(summary["groups"]) > 1:
        table.add_row(
            "overall",
            str(summary["gradings"]),
            _fmt(summary["agreement"], signed=True),
            _fmt(summary["first_ranked_first"]),
            _fmt(summary["last_ranked_first"]),
            _fmt(summary["chance"]),
            style="bold",
        )
    return table


def cmd_degrade(args: argparse.Namespace) -> int:
    console = Console()
    degradations = degrading.degrade_file(args.group_file, args.clean, args.kinds)
    groups_path, reference_path = degrading.write_degradations(degradations, args.out)
    for d in degradations:
        table = Table(title=f"{d.group.group_id}: variants of {d.clean_id}", show_edge=False, pad_edge=False)
        for column in ("trajectory", "kind", "severity", "what changed"):
            table.add_column(
                column, justify="right" if column == "severity" else "left", no_wrap=column == "trajectory"
            )
        for v in d.variants:
            table.add_row(v.trajectory_id, v.kind, str(v.severity), v.note)
        console.print(table)
        for kind, reason in d.skipped.items():
            console.print(f"  [yellow]skipped {kind}[/]: {reason}", highlight=False)
        console.print(f"  reference: {' > '.join(' = '.join(tier) for tier in d.reference)}", highlight=False)
    console.print(f"-> {groups_path}, {reference_path}", highlight=False)
    return 0


def register(subparsers: Any) -> None:
    """Add the `eval` and `degrade` commands to the top-level parser's subparsers."""
    evaluate = subparsers.add_parser(
        "eval", help="score a grader's rankings against reference rankings, and its consistency"
    )
    evaluate.add_argument(
        "inputs", nargs="+", type=Path, help="group files (JSON object, JSON array or JSONL)"
    )
    evaluate.add_argument(
        "--reference",
        required=True,
        type=Path,
        help="JSON object: group id -> ranking (lists of ids, best first)",
    )
    evaluate.add_argument(
        "--out", required=True, type=Path, help="run directory; eval.json and results.jsonl are written there"
    )
    evaluate.add_argument(
        "--consensus", type=int, default=1, metavar="K", help="grade K times and take the Borda consensus"
    )
    evaluate.add_argument(
        "--consistency",
        type=int,
        default=0,
        metavar="K",
        help="also grade each group K times (the single grader, seed + k, trajectories reordered): "
        "agreement and position bias",
    )
    add_grading_arguments(evaluate)
    evaluate.set_defaults(func=cmd_eval)

    degrade = subparsers.add_parser(
        "degrade", help="make passing-but-worse variants of a clean trajectory, with their reference order"
    )
    degrade.add_argument("group_file", type=Path)
    degrade.add_argument(
        "--clean", required=True, metavar="TRAJECTORY_ID", help="the clean passing trajectory"
    )
    degrade.add_argument(
        "--out", required=True, type=Path, help="where groups.jsonl and reference.json are written"
    )
    degrade.add_argument(
        "--kinds",
        nargs="+",
        choices=list(degrading.KINDS),
        default=list(degrading.KINDS),
        help="; ".join(f"{k}: {d}" for k, d in degrading.DESCRIPTIONS.items()),
    )
    degrade.set_defaults(func=cmd_degrade)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gagar", description="Evaluate graders; make evaluation data")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:  # DegradeError is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
