"""The `gagar` command: argument parsing and printing only; the work is done by the Python API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from grader import redistribute
from grader.cache import GradeCache
from grader.concurrency import Concurrency
from grader.formats import LoadError, import_swebench, load_groups, write_groups
from grader.graders import get_grader
from grader.graders.base import GRADERS
from grader.graders.budgets import Budgets
from grader.models import GroupResult
from grader.pipeline import GradingOptions, grade_indexed, write_results
from grader.workspace import WorkspaceError, open_workspace

DETAIL_LIMIT = 5  # groups printed in full after a run; larger batches get the summary only


def _scheme_params(args: argparse.Namespace) -> dict[str, float]:
    params: dict[str, float] = {"floor": args.floor}
    if args.scheme == "exponential":
        params["decay"] = args.decay
    if args.scheme == "top-k":
        params["k"] = args.top_k
    return params


def _print_group(console: Console, result: GroupResult) -> None:
    title = f"[bold]{result.group_id}[/]: {result.status}"
    if result.reason:
        title += f" ({result.reason})"
    console.print(title)
    if result.redistribution:
        console.print(f"  redistribution: {result.redistribution}")
    if result.usage:
        u = result.usage
        console.print(
            f"  model: {u.get('requests', 0)} requests, {u.get('total_tokens', 0):,} tokens "
            f"({u.get('cached_prompt_tokens', 0):,} prompt tokens cached), "
            f"{u.get('tool_calls', 0)} tool calls, {u.get('retries', 0)} retries; "
            f"transcript {result.transcript}",
            highlight=False,
            soft_wrap=True,
        )
    for tid, hits in result.flags.items():
        console.print(f"  [bold red]flag[/] {tid}: addresses the grader: {hits[0]!r}", soft_wrap=True)
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
            tid,
            "yes" if report and report.passed else "no",
            f"{result.weights[tid]:.3f}" if tid in result.weights else "-",
            fmt(result.advantages_before.get(tid)),
            fmt(result.advantages_after.get(tid)),
            (report.apply_method or report.error or "-") if report else "-",
        )
    console.print(table)
    for tid in order:
        report = result.trajectories.get(tid)
        if report and (report.rationale or report.error):
            console.print(f"  {tid}: {report.rationale or report.error}", highlight=False, soft_wrap=True)


def _grader_options(args: argparse.Namespace) -> dict[str, object]:
    if args.grader != "llm":
        return {}
    if not args.model:
        raise ValueError("--grader llm needs --model")
    budgets = Budgets(turns=args.max_turns, wall_seconds=args.max_seconds, tokens=args.max_tokens)
    return {
        "model": args.model,
        "base_url": args.base_url,
        "api_key_env": args.api_key_env,
        "prompts_dir": args.prompts,
        "sandbox": None if args.sandbox == "none" else args.sandbox,
        "show_failing": args.show_failing,
        "seed": args.seed,
        "tool_mode": args.tool_mode,
        "temperature": args.temperature,
        "budgets": budgets,
        "transcript_dir": args.out / "transcripts",
    }


def cmd_grade(args: argparse.Namespace) -> int:
    console = Console()
    items = load_groups(args.inputs, pass_threshold=args.pass_threshold)
    concurrency = Concurrency(llm_calls=args.max_llm_calls, sandboxes=args.max_sandboxes)
    options = GradingOptions(
        grade_all_pass=args.grade_all_pass,
        scheme=args.scheme,
        scheme_params=_scheme_params(args),
        preserve=args.preserve,
        max_patch_bytes=args.max_patch_bytes,
        concurrency=concurrency,
        cache=GradeCache(args.cache) if args.cache else None,
    )
    grader_options = _grader_options(args)
    if args.grader == "llm":
        grader_options["concurrency"] = concurrency
    grader = get_grader(args.grader, **grader_options)
    args.out.mkdir(parents=True, exist_ok=True)
    # The run directory keeps the graded groups too, so viewers can show patches without the inputs.
    write_groups([item for item in items if not isinstance(item, LoadError)], args.out / "groups.jsonl")
    results: dict[int, GroupResult] = {}  # written in input order, whatever order they finish in
    with Progress(
        TextColumn("grading"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
        console=Console(stderr=True),
        transient=True,
        disable=len(items) < 2,
    ) as progress:
        task = progress.add_task("grade", total=len(items), last="")
        for index, result in _stream(items, grader, options, args):
            results[index] = result
            progress.update(task, advance=1, last=f"{result.group_id}: {result.status}")
    ordered = [results[i] for i in sorted(results)]
    path = write_results(ordered, args.out)
    counts = {status: sum(r.status == status for r in ordered) for status in ("graded", "skipped", "failed")}
    if len(ordered) <= DETAIL_LIMIT:
        for result in ordered:
            _print_group(console, result)
    else:
        for result in ordered:
            if result.status == "failed":
                console.print(f"[red]failed[/] {result.group_id}: {result.reason}", highlight=False)
    console.print(
        f"{len(ordered)} group{'s' if len(ordered) != 1 else ''}: {counts['graded']} graded, "
        f"{counts['skipped']} skipped, "
        f"{counts['failed']} failed -> {path}"
    )
    return 1 if counts["failed"] else 0


def _stream(items: list, grader, options: GradingOptions, args: argparse.Namespace):
    """(input index, result) pairs as groups finish, in-process or through Ray."""
    if args.ray is not None:
        from grader.integrations.ray import RayGrader

        ray_grader = RayGrader(
            grader_name=args.grader,
            grader_options=_grader_options(args),
            options=options,
            address=args.ray or None,
            actors=args.workers,
        )
        yield from ray_grader.grade_indexed(items)
        return
    yield from grade_indexed(items, grader, options, workers=args.workers)


def cmd_workspace(args: argparse.Namespace) -> int:
    items = load_groups([args.group_file])
    groups = [item for item in items if not isinstance(item, LoadError)]
    for item in items:
        if isinstance(item, LoadError):
            print(f"error: {item}", file=sys.stderr)
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
    sub = parser.add_subparsers(dest="command", required=True)

    grade = sub.add_parser("grade", help="grade groups and redistribute their advantages")
    grade.add_argument("inputs", nargs="+", type=Path, help="group files (JSON object, JSON array or JSONL)")
    grade.add_argument(
        "--out", required=True, type=Path, help="run directory; results.jsonl is written there"
    )
    grade.add_argument("--grader", default="heuristic", choices=list(GRADERS))
    grade.add_argument(
        "--grade-all-pass", action="store_true", help="also grade groups where every trajectory passed"
    )
    grade.add_argument(
        "--scheme", default=redistribute.DEFAULT_SCHEME, choices=sorted(redistribute.WEIGHT_SCHEMES)
    )
    grade.add_argument(
        "--floor", type=float, default=redistribute.DEFAULT_FLOOR, help="lowest weight, in (0, 1]"
    )
    grade.add_argument("--decay", type=float, default=0.5, help="per-rank factor of the exponential scheme")
    grade.add_argument("--top-k", type=int, default=1, help="ranks kept at full weight by the top-k scheme")
    grade.add_argument("--preserve", default="sequence", choices=["sequence", "token", "none"])
    grade.add_argument(
        "--pass-threshold", type=float, default=1.0, help="reward at which a trajectory passes"
    )
    grade.add_argument("--max-patch-bytes", type=int, default=GradingOptions.max_patch_bytes)
    grade.add_argument("--workers", type=int, default=4, help="groups graded at once (default 4)")
    grade.add_argument("--max-llm-calls", type=int, default=32, help="LLM requests in flight at once")
    grade.add_argument("--max-sandboxes", type=int, default=4, help="sandboxes open at once")
    grade.add_argument(
        "--cache", type=Path, help="grade cache folder: groups graded before are not graded again"
    )
    grade.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="grade on a Ray cluster (a local one when no address is given)",
    )
    llm = grade.add_argument_group("llm grader")
    llm.add_argument("--model", help="model name as the endpoint knows it")
    llm.add_argument("--base-url", help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    llm.add_argument(
        "--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key"
    )
    llm.add_argument("--prompts", type=Path, help="folder whose files override the shipped prompts/")
    llm.add_argument(
        "--sandbox",
        default="docker",
        choices=["docker", "local", "none"],
        help="where the run tool executes code (none: no run tool)",
    )
    llm.add_argument(
        "--tool-mode",
        default="native",
        choices=["native", "text"],
        help="native function calling, or JSON in text for endpoints without it",
    )
    llm.add_argument("--show-failing", action="store_true", help="show failing trajectories for contrast")
    llm.add_argument("--seed", type=int, help="seed for labels and their order (default: random, recorded)")
    llm.add_argument("--temperature", type=float, default=0.0)
    llm.add_argument("--max-turns", type=int, default=Budgets.turns)
    llm.add_argument("--max-tokens", type=int, default=Budgets.tokens)
    llm.add_argument("--max-seconds", type=float, default=Budgets.wall_seconds)
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
        "--repo-root", type=Path, help="local clones named owner__repo (default: GitHub URLs)"
    )
    swebench.add_argument("-o", "--output", required=True, type=Path)
    swebench.set_defaults(func=cmd_import_swebench)

    from grader.evaluation.cli import register as register_evaluation
    from grader.inspect.cli import register as register_inspect
    from grader.sandbox.cli import register as register_sandbox

    register_sandbox(sub)
    register_evaluation(sub)
    register_inspect(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
