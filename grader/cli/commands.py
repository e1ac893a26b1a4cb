"""The `gagar` command: argument parsing and printing only; the work is done by the Python API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

import grader
from grader.cli.display import Display, cell
from grader.cli.examples import add_examples
from grader.cli.options import GradingArguments, add_grading_arguments, grading_from_args
from grader.errors import GagarError, WorkspaceError
from grader.graders.base import Grader, get_grader
from grader.graders.cache import CachedGrader
from grader.groups.formats import LoadFailure, check_inputs, load_groups, write_groups
from grader.groups.models import GroupResult
from grader.pipeline import grade_indexed, write_results
from grader.sandbox.swebench import import_swebench
from grader.util.terminal import printable
from grader.workspace.workspace import open_workspace

DETAIL_LIMIT = 5  # groups printed in full after a run; larger batches get the summary only


def _print_group(console: Console, result: GroupResult) -> None:
    # Ids, reasons and rationales are untrusted: printed as Text (never markup), control and bidi
    # characters spelled out.
    title = Text(printable(result.group_id), style="bold")
    title.append(f": {result.status}" + (f" ({printable(result.reason)})" if result.reason else ""))
    console.print(title, highlight=False, soft_wrap=True)
    if result.status != "graded":  # nothing was ranked or changed: the reason is the whole story
        return
    if result.redistribution:
        console.print(Text(f"  redistribution: {printable(result.redistribution)}"))
    if result.usage:
        u = result.usage
        console.print(
            f"  model: {u.get('requests', 0)} requests, {u.get('total_tokens', 0):,} tokens "
            f"({u.get('cached_prompt_tokens', 0):,} prompt tokens cached), "
            f"{u.get('tool_calls', 0)} tool calls, {u.get('retries', 0)} retries; "
            f"transcript {escape(printable(str(result.transcript)))}",
            highlight=False,
            soft_wrap=True,
        )
    for tid, hits in result.flags.items():
        line = Text("  ")
        line.append("flag", style="bold red")
        line.append(printable(f" {tid}: addresses the grader: {hits[0]!r}"))
        console.print(line, soft_wrap=True)
    rank_of = {tid: i + 1 for i, tier in enumerate(result.ranking) for tid in tier}
    table = Table(show_edge=False, pad_edge=False)
    for column in ("rank", "trajectory", "passed", "weight", "advantage before", "after", "apply"):
        numeric = column in ("rank", "weight", "advantage before", "after")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=column == "trajectory")
    order = [tid for tier in result.ranking for tid in tier]
    order += [tid for tid in result.advantages_before if tid not in order]

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:+.4f}"

    for tid in order:
        report = result.trajectories.get(tid)
        table.add_row(
            str(rank_of.get(tid, "-")),
            Text(printable(tid)),
            "yes" if report and report.passed else "no",
            f"{result.weights[tid]:.3f}" if tid in result.weights else "-",
            fmt(result.advantages_before.get(tid)),
            fmt(result.advantages_after.get(tid)),
            Text(printable(report.apply_method or report.error or "-")) if report else "-",
        )
    console.print(table)
    for tid in order:
        report = result.trajectories.get(tid)
        if report and (report.rationale or report.error):
            text = Text(printable(f"  {tid}: {report.rationale or report.error}"))
            console.print(text, highlight=False, soft_wrap=True)


def make_grader(name: str, options: dict[str, Any], cache: Path | None = None) -> Grader:
    """The grader the options name, behind the grade cache when one is given (picklable, for Ray actors)."""
    grader = get_grader(name, **options)
    return CachedGrader(grader, cache) if cache else grader


def cmd_grade(args: argparse.Namespace) -> int:
    console = Console()
    inputs = check_inputs(args.inputs)
    grading = grading_from_args(args, transcript_dir=args.out / "transcripts")
    items = load_groups(inputs, pass_threshold=args.pass_threshold)
    grader = make_grader(grading.grader, grading.grader_options, args.cache)
    args.out.mkdir(parents=True, exist_ok=True)
    # The run directory keeps the graded groups too, so viewers can show patches without the inputs.
    write_groups([item for item in items if not isinstance(item, LoadFailure)], args.out / "groups.jsonl")
    results: dict[int, GroupResult] = {}  # written in input order, whatever order they finish in
    # The bar shows ids as plain text, and a failure of its own is reported and ignored: the results below
    # are written whatever happens to it.
    with Display("grading", total=len(items), enabled=len(items) > 1) as display:
        for index, result in _stream(items, grader, grading, args):
            results[index] = result
            display.update(f"{result.group_id}: {result.status}", advance=1)
    ordered = [results[i] for i in sorted(results)]
    path = write_results(ordered, args.out)
    counts = {status: sum(r.status == status for r in ordered) for status in ("graded", "skipped", "failed")}
    if len(ordered) <= DETAIL_LIMIT:
        for result in ordered:
            _print_group(console, result)
    else:
        for result in ordered:
            if result.status == "failed":
                line = Text("failed", style="red")
                line.append(printable(f" {result.group_id}: {result.reason}"))
                console.print(line, highlight=False)
    console.print(
        cell(
            f"{len(ordered)} group{'s' if len(ordered) != 1 else ''}: {counts['graded']} graded, "
            f"{counts['skipped']} skipped, {counts['failed']} failed -> {path}"
        ),
        highlight=False,
        soft_wrap=True,
    )
    return 1 if counts["failed"] else 0


def _stream(items: list, grader: Grader, grading: GradingArguments, args: argparse.Namespace):
    """(input index, result) pairs as groups finish, in-process or through Ray."""
    if args.ray is not None:
        from grader.integrations.ray import RayGrader

        ray_grader = RayGrader(
            grader_name=grading.grader,
            grader_factory=partial(make_grader, grading.grader, grading.grader_options, args.cache),
            options=grading.options,
            address=args.ray or None,
            actors=args.workers,
        )
        yield from ray_grader.grade_indexed(items)
        return
    yield from grade_indexed(items, grader, grading.options, workers=args.workers)


def cmd_workspace(args: argparse.Namespace) -> int:
    items = load_groups([args.group_file])
    groups = [item for item in items if not isinstance(item, LoadFailure)]
    for item in items:
        if isinstance(item, LoadFailure):
            print(f"error: {printable(str(item))}", file=sys.stderr)
    if len(groups) != 1:
        selected = [g for g in groups if g.group_id == args.group] if args.group else []
        if len(selected) != 1:
            print(
                f"error: {args.group_file} holds {len(groups)} valid groups; choose one with --group",
                file=sys.stderr,
            )
            return 2
        groups = selected
    try:
        with open_workspace(groups[0], root=args.dir, keep=True) as workspace:
            print(f"workspace {workspace.git_dir}  (base {workspace.base_commit})")
            for c in workspace.candidates.values():
                where = c.ref if c.commit else f"(no branch: {c.error})"
                method = f"  [{c.apply_method}]" if c.commit else ""
                klass = f"  class {c.patch_class}" if c.patch_class is not None else ""
                print(f"{c.trajectory_id}\t{'pass' if c.passed else 'fail'}\t{where}{method}{klass}")
            print(f"inspect with: git --git-dir {workspace.git_dir} diff base candidates/<id>")
    except WorkspaceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def cmd_import_swebench(args: argparse.Namespace) -> int:
    groups = import_swebench(args.instances, args.predictions, args.results, repo_root=args.repo_root)
    count = write_groups(groups, args.output)
    print(f"wrote {count} groups to {args.output}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gagar", description="Groupwise Agentic Grading and Advantage Redistribution"
    )
    parser.add_argument("--version", action="version", version=f"gagar {grader.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    grade = sub.add_parser("grade", help="grade groups and redistribute their advantages")
    grade.add_argument("inputs", nargs="+", type=Path, help="group files (JSON object, JSON array or JSONL)")
    grade.add_argument(
        "--out", required=True, type=Path, help="run directory; results.jsonl is written there"
    )
    add_grading_arguments(grade)
    grade.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="grade on a Ray cluster (a local one when no address is given)",
    )
    grade.set_defaults(func=cmd_grade)

    workspace = sub.add_parser("workspace", help="build one group's workspace and keep it for inspection")
    workspace.add_argument("group_file", type=Path)
    workspace.add_argument("--dir", required=True, type=Path, help="where to build it (must be empty or new)")
    workspace.add_argument("--group", help="group id, when the file holds several")
    workspace.set_defaults(func=cmd_workspace)

    importer = sub.add_parser("import", help="turn other formats into group files")
    formats = importer.add_subparsers(dest="format", required=True)
    swebench = formats.add_parser("swebench", help="SWE-bench instances, predictions and harness results")
    swebench.add_argument("--instances", required=True, type=Path)
    swebench.add_argument("--predictions", required=True, nargs="+", type=Path)
    swebench.add_argument("--results", required=True, nargs="+", type=Path)
    swebench.add_argument(
        "--repo-root",
        type=Path,
        metavar="DIR",
        help="a folder of git copies of the task repositories, laid out DIR/OWNER/NAME (DIR/OWNER__NAME is "
        "accepted too), checked at once; without it the groups name https://github.com/OWNER/NAME",
    )
    swebench.add_argument("-o", "--output", required=True, type=Path)
    swebench.set_defaults(func=cmd_import_swebench)

    from grader.distill.cli import register as register_distill
    from grader.evaluation.cli import register as register_evaluation
    from grader.inspect.cli import register as register_inspect
    from grader.redistribution.simulate_cli import register as register_simulate
    from grader.sandbox.cli import register as register_sandbox
    from grader.servers.serve import register as register_serve

    register_sandbox(sub)
    register_evaluation(sub)
    register_inspect(sub)
    register_simulate(sub)
    register_distill(sub)
    register_serve(sub)
    add_examples(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (GagarError, ValueError, OSError) as exc:  # OSError: a full disk, an unwritable --out
        print(f"error: {printable(str(exc))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
