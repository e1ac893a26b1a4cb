"""`gagar eval`, `gagar degrade` and `gagar reference`: argument parsing and printing; the work is in harness
and degrade. The `bench` commands are in `grader.evaluation.bench_cli`.

`register(subparsers)` adds these commands and the `bench` ones to gagar's parser; `python -m
grader.evaluation.cli` runs them on their own.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grader.cli.display import cell
from grader.cli.options import GradingArguments, add_grading_arguments, command_group, grading_from_args
from grader.errors import InputFileError
from grader.evaluation import degrade as degrading
from grader.evaluation import harness
from grader.evaluation.bench_cli import register as register_bench
from grader.evaluation.benchmark import SPLITS, Benchmark, load_benchmark
from grader.evaluation.consensus import ConsensusGrader
from grader.evaluation.prepare import TRACKS, resolve_bench
from grader.graders import get_grader
from grader.graders.base import GRADERS, Grader
from grader.graders.cache import CachedGrader
from grader.groups.formats import LoadFailure, check_inputs, load_groups
from grader.groups.models import Group
from grader.pipeline import write_results
from grader.ranking.references import Reference, load_references, write_references
from grader.util.atomic import write_text_atomic


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


def _eval_inputs(
    args: argparse.Namespace,
) -> tuple[list[Group | LoadFailure], dict[str, Reference], Benchmark | None]:
    """The groups to grade and their references: from a benchmark (one split or all), or from files."""
    if (args.reference is None) == (args.bench is None):
        raise InputFileError("give either --reference FILE (with group files) or --bench NAME")
    if args.bench is not None:
        if args.inputs:
            raise InputFileError("--bench brings its own groups: give no group files")
        bench = load_benchmark(resolve_bench(args.bench, args.track))
        ids = bench.group_ids(args.split)
        return [bench.groups[gid] for gid in ids], {gid: bench.references[gid] for gid in ids}, bench
    if args.split is not None or args.track is not None:
        raise InputFileError("--split and --track need --bench")
    if not args.inputs:
        raise InputFileError("give the group files to grade against --reference")
    inputs = check_inputs(args.inputs)
    references = load_references(args.reference)
    return load_groups(inputs, pass_threshold=args.pass_threshold), references, None


def bench_grading_mode(bench: Benchmark, grading: GradingArguments) -> None:
    """Set what a benchmark asks of the grader: a verification track marks resolved and unresolved patches
    alike as passing, so a grader that can be told (the LLM grader's `candidates_may_fail`) must not be told
    that they all pass the tests."""
    config = GRADERS.get(grading.grader).config
    takes_mode = config is not None and "candidates_may_fail" in {f.name for f in dataclasses.fields(config)}
    if bench.manifest.get("candidates_may_fail") and takes_mode:
        grading.grader_options["candidates_may_fail"] = True


def cmd_eval(args: argparse.Namespace) -> int:
    console = Console()
    items, references, bench = _eval_inputs(args)
    grading = grading_from_args(args, transcript_dir=args.out / "transcripts")
    if bench is not None:
        bench_grading_mode(bench, grading)
    make_grader = grader_factory(args, grading)
    options = grading.options
    started = time.monotonic()
    evaluation, results = harness.evaluate(
        items, references, _grader(args, make_grader), options, workers=args.workers
    )
    wall = time.monotonic() - started
    args.out.mkdir(parents=True, exist_ok=True)
    write_results(results, args.out)
    report: dict[str, Any] = {"consensus": args.consensus, **evaluation.as_dict()}
    report["overall"]["interval"] = evaluation.interval(args.bootstrap) if args.bootstrap else None
    report["overall"]["wall_seconds"] = round(wall, 3)
    if bench is not None:
        agreement = bench.agreement()
        report["bench"] = {
            "name": bench.name,
            "root": str(bench.root),
            "split": args.split or "all",
            "label_agreement": {"pairs": agreement.pairs, "agreed": agreement.agreed, "rate": agreement.rate},
        }
        example = bench.manifest.get("example")
        # A track labelled by harness reports alone (verification) has no double labels to agree on.
        labels = (
            f"; double labels agreed on {agreement.agreed}/{agreement.pairs} pairs" if agreement.pairs else ""
        )
        console.print(
            cell(
                f"benchmark {bench.name}, split {args.split or 'all'}: {len(references)} groups{labels}"
                + (" (a format example: its figures say nothing about real code)" if example else "")
            ),
            highlight=False,
        )
    console.print(score_table(evaluation))
    console.print(coverage_line(report["overall"]), highlight=False)
    console.print(time_line(report["overall"], args.workers), highlight=False)
    categories = evaluation.by_category(resamples=args.bootstrap)
    if categories:
        report["by_category"] = categories
        console.print(category_table(categories))
    kinds = evaluation.by_kind()
    if kinds:
        console.print(kind_table(kinds))
    if args.consistency:
        # The single grader's consistency, also under --consensus: it is what the consensus must make up for.
        scored = [item for item in items if isinstance(item, Group) and item.group_id in references]
        groups = harness.consistency(scored, make_grader, args.consistency, options)
        report["consistency"] = {"k": args.consistency, **harness.consistency_summary(groups)}
        console.print(consistency_table(report["consistency"]))
    write_text_atomic(args.out / "eval.json", json.dumps(report, indent=2, allow_nan=False) + "\n")
    for gid in evaluation.missing:
        console.print(cell(f"no group {gid!r} in the input", style="yellow"), highlight=False)
    console.print(cell(f"-> {args.out / 'eval.json'}, {args.out / 'results.jsonl'}"), highlight=False)
    failed = evaluation.overall()["failed"]
    return 1 if failed or evaluation.missing else 0


def _interval(interval: tuple[float, float] | None) -> str:
    return "-" if interval is None else f"[{interval[0]:.3f}, {interval[1]:.3f}]"


def coverage_line(overall: dict[str, Any]) -> str:
    """One line: pairs scored of the pairs the references define, and the overall accuracy's interval."""
    line = (
        f"coverage {overall['scored_pairs']}/{overall['reference_pairs']} reference pairs "
        f"({_fmt(overall['coverage'])}): both candidates graded"
    )
    if overall.get("interval") is not None:
        line += (
            f"; pairwise {_fmt(overall['pairwise_accuracy'])}, bootstrap 95% {_interval(overall['interval'])}"
        )
    elif overall["graded"] < 2:
        line += "; one group graded: no interval"
    return line


def time_line(overall: dict[str, Any], workers: int) -> str:
    """One line: the grading's wall time, and the grading time summed over groups (the table's seconds
    column), which exceeds the wall time when groups are graded at once."""
    groups = overall["groups"]
    return (
        f"time: {overall['wall_seconds']:.2f} s wall for {groups} group{'s' if groups != 1 else ''} "
        f"({workers} at a time); {overall['seconds']:.2f} s of grading summed over the groups"
    )


def category_table(categories: dict[str, dict[str, Any]]) -> Table:
    table = Table(title="by category of the reference's pairs", show_edge=False, pad_edge=False)
    for column in ("category", "groups", "pairs", "pairwise", "95% interval"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for name, figures in categories.items():
        table.add_row(
            cell(name),
            str(figures["groups"]),
            str(figures["scored_pairs"]),
            _fmt(figures["pairwise_accuracy"]),
            _interval(figures.get("interval")),
        )
    return table


def score_table(evaluation: harness.Evaluation) -> Table:
    table = Table(title=cell(f"grader {evaluation.grader}"), show_edge=False, pad_edge=False)
    columns = ("group", "status", "pairs", "pairwise", "tau", "top-1", "inversions", "tokens", "seconds")
    for column in columns:
        left = column in ("group", "status")
        table.add_column(column, justify="left" if left else "right", no_wrap=column == "group")

    def row(name: str, status: str, figures: dict[str, Any]) -> list[Text | str]:
        return [
            cell(name),
            cell(status),
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
            *row("overall (time summed)", f"{overall['graded']}/{overall['groups']} graded", overall),
            style="bold",
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
            cell(kind), str(severity or "-"), str(figures["scored_pairs"]), _fmt(figures["pairwise_accuracy"])
        )
    return table


def consistency_table(summary: dict[str, Any]) -> Table:
    table = Table(title=f"consistency over {summary['k']} orders", show_edge=False, pad_edge=False)
    for column in ("group", "graded", "agreement", "first shown on top", "last shown on top", "chance"):
        table.add_column(column, justify="left" if column == "group" else "right", no_wrap=column == "group")
    for gid, g in summary["groups"].items():
        table.add_row(
            cell(gid),
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


def cmd_reference_consensus(args: argparse.Namespace) -> int:
    """`gagar reference consensus`: grade each group K times under other label orders, keep agreed pairs.

    Raises:
        InputFileError: a group id appears more than once in the inputs.
    """
    console = Console()
    items = load_groups(check_inputs(args.inputs), pass_threshold=args.pass_threshold)
    ids = [item.group_id for item in items if isinstance(item, Group)]
    twice = sorted({gid for gid in ids if ids.count(gid) > 1})
    if twice:
        raise InputFileError(f"group ids appear more than once in the inputs: {', '.join(twice)}")
    grading = grading_from_args(args)
    groups = harness.consistency(items, grader_factory(args, grading), args.k, grading.options)
    references = harness.consensus_references(groups, args.threshold)
    write_references(references, args.out)
    for g in groups:
        kept = len(references[g.group_id].preferences) if g.group_id in references else 0
        failed = f", {len(g.failures)} failed" if g.failures else ""
        console.print(
            cell(
                f"{g.group_id}: {len(g.rankings)}/{g.k} gradings{failed}, agreement "
                f"{_fmt(g.agreement, signed=True)}, {kept} pairs agreed by at least {args.threshold:g}"
            ),
            highlight=False,
        )
    for item in items:
        if isinstance(item, LoadFailure):
            console.print(cell(item, style="yellow"), highlight=False)
    console.print(cell(f"-> {args.out}"), highlight=False)
    return 0 if len(references) == len(groups) and all(isinstance(i, Group) for i in items) else 1


def cmd_degrade(args: argparse.Namespace) -> int:
    """`gagar degrade`: write the variants and their reference into a new folder (an existing one with
    --force only), print each group's variants and where they went.

    Raises:
        InputFileError: --out already holds files and --force is not given (nothing is written).
    """
    console = Console(soft_wrap=True)
    held = sorted(entry.name for entry in args.out.iterdir()) if args.out.is_dir() else []
    if args.out.exists() and not args.out.is_dir():
        raise InputFileError(f"--out {args.out}: a file, not a folder")
    if held and not args.force:
        raise InputFileError(
            f"--out {args.out} already holds {', '.join(held[:5])}{', ...' if len(held) > 5 else ''}: "
            "give a new folder, or --force to overwrite its groups.jsonl and reference.json"
        )
    degradations = degrading.degrade_file(args.group_file, args.clean, args.kinds)
    groups_path, reference_path = degrading.write_degradations(degradations, args.out)
    for d in degradations:
        title = cell(f"{d.group.group_id}: variants of {d.clean_id}")
        table = Table(title=title, show_edge=False, pad_edge=False)
        for column in ("trajectory", "kind", "severity", "what changed"):
            table.add_column(
                column, justify="right" if column == "severity" else "left", no_wrap=column == "trajectory"
            )
        for v in d.variants:
            table.add_row(cell(v.trajectory_id), cell(v.kind), str(v.severity), cell(v.note))
        console.print(table)
        for kind, reason in d.skipped.items():
            console.print(cell(f"  skipped {kind}: {reason}", style="yellow"), highlight=False)
        order = " > ".join(" = ".join(tier) for tier in d.reference)
        console.print(cell(f"  reference: {order}"), highlight=False)
    variants = sum(len(d.variants) for d in degradations)
    groups = f"{len(degradations)} group{'s' if len(degradations) != 1 else ''}"
    written = f"{groups_path.name}, {reference_path.name}"
    console.print(cell(f"wrote {variants} variants of {groups} to {args.out}: {written}"), highlight=False)
    return 0


def register(subparsers: Any) -> None:
    """Add the `eval` and `degrade` commands to the top-level parser's subparsers."""
    evaluate = subparsers.add_parser(
        "eval", help="score a grader against references or a benchmark, and its consistency"
    )
    evaluate.add_argument(
        "inputs",
        nargs="*",
        type=Path,
        help="group files (JSON object, JSON array or JSONL); not with --bench",
    )
    evaluate.add_argument(
        "--reference",
        type=Path,
        help="a reference file of any kind (docs/benchmark.md): group id -> ranking, or pairwise "
        "preferences, degrade or consensus references, as a JSON object or JSONL",
    )
    evaluate.add_argument(
        "--bench",
        metavar="NAME_OR_PATH",
        help="a benchmark folder, or its name: looked up in $GAGAR_BENCHMARKS, ./benchmarks and gagar's own "
        "benchmarks/ (a recipe benchmark once gagar bench prepare has prepared it)",
    )
    evaluate.add_argument("--split", choices=SPLITS, help="only this split of the benchmark (default: all)")
    evaluate.add_argument(
        "--track",
        choices=TRACKS,
        help="a prepared recipe's track (default preference); verification grades every candidate as passing",
    )
    evaluate.add_argument(
        "--bootstrap",
        type=int,
        default=2000,
        metavar="N",
        help="resamples of groups for the 95%% intervals (0: none)",
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

    register_bench(subparsers)

    reference_commands = command_group(subparsers, "reference", "make references (see docs/benchmark.md)")
    consensus = reference_commands.add_parser(
        "consensus",
        help="grade each group K times under fresh label orders; keep the pairs enough gradings agree on",
    )
    consensus.add_argument("inputs", nargs="+", type=Path, help="group files")
    consensus.add_argument("--k", type=int, default=5, help="gradings per group (seed + i, reordered)")
    consensus.add_argument(
        "--threshold",
        type=float,
        default=0.8,
        help="least share of the K gradings that must agree, in (0.5, 1]",
    )
    consensus.add_argument("--out", required=True, type=Path, help="the reference file to write (JSON)")
    add_grading_arguments(consensus)
    consensus.set_defaults(func=cmd_reference_consensus)

    degrade = subparsers.add_parser(
        "degrade", help="make passing-but-worse variants of a clean trajectory, with their reference order"
    )
    degrade.add_argument("group_file", type=Path)
    degrade.add_argument(
        "--clean", required=True, metavar="TRAJECTORY_ID", help="the clean passing trajectory"
    )
    degrade.add_argument(
        "--out",
        required=True,
        type=Path,
        help="a new folder for groups.jsonl and reference.json (an existing one that holds files: with "
        "--force only)",
    )
    degrade.add_argument(
        "--force", action="store_true", help="overwrite groups.jsonl and reference.json in an existing --out"
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
