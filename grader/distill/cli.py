"""`gagar distill`: argument parsing and the progress bar; the work is in `grader.distill.run`."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from grader.cli.options import add_config_arguments, config_from_args
from grader.distill.benchmarks import benchmark_folders, load_benchmarks
from grader.distill.run import DistillConfig, Plan, distill
from grader.evaluation.benchmark import benchmark_roots
from grader.evaluation.prepare import prepared_root
from grader.graders.llm.config import LLMConfig
from grader.groups.formats import check_inputs
from grader.util.concurrency import Concurrency
from grader.util.terminal import printable

# The teacher's options: the LLM grader's, as gagar grade takes them (one option set, one name for each), less
# the seed, which distillation sets per sample.
TEACHER_FIELDS = [f.name for f in dataclasses.fields(LLMConfig) if f.name != "seed"]


def teacher_options(args: argparse.Namespace) -> dict[str, Any]:
    """The teacher's LLM grader options from the command line, checked.

    Raises:
        ValueError: --tool-mode text or --structured: the SFT rows are native tool-calling conversations,
            the form the trained grader is served in, so the teacher must call tools natively.
    """
    teacher = config_from_args(LLMConfig, args, only=TEACHER_FIELDS)
    if teacher.pop("tool_mode") != "native" or teacher.get("structured"):
        raise ValueError(
            "gagar distill takes --tool-mode native only (and no --structured): it writes native "
            "tool-calling conversations, the form the trained grader is served in, so the teacher must call "
            "tools natively"
        )
    return teacher


def cmd_distill(args: argparse.Namespace) -> int:
    """`gagar distill`: grade each group K times with the teacher, keep what agrees, write the SFT files.

    Raises:
        ValueError: no teacher `--model` is given.
    """
    console = Console()
    inputs = check_inputs(args.inputs)
    if not args.model:
        raise ValueError("gagar distill needs the teacher's --model")
    config = DistillConfig(**config_from_args(DistillConfig, args))
    teacher = teacher_options(args)
    resources = Concurrency(**config_from_args(Concurrency, args))
    # Prepared recipe benchmarks (gagar bench prepare) live in the cache: refused as well.
    search = [] if args.no_default_benchmarks else [*benchmark_roots(), prepared_root()]
    folders = benchmark_folders(args.benchmark, search)
    benchmarks = load_benchmarks(folders)
    tally = {"done": 0, "kept": 0, "tokens": 0}
    with Progress(
        TextColumn("distilling"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("keep {task.fields[rate]}"),
        TextColumn("teacher tokens {task.fields[tokens]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("distill", total=None, rate="-", tokens="0")

        def on_plan(work: Plan) -> None:
            progress.update(task, total=len(work.pending))
            for gid, why in work.left_out.items():
                line = Text(why["status"], style="yellow")
                line.append(printable(f" {gid}: {why['reason']}"))
                console.print(line, highlight=False, soft_wrap=True)

        def on_record(record: dict[str, Any]) -> None:
            tally["done"] += 1
            tally["kept"] += record["status"] == "kept"
            tally["tokens"] += int(record.get("usage", {}).get("total_tokens", 0))
            rate = f"{tally['kept'] / tally['done']:.0%}"
            progress.update(task, advance=1, rate=rate, tokens=f"{tally['tokens']:,}")

        def notify(message: str) -> None:  # a damaged file, moved aside and made again
            progress.console.print(Text(printable(message), style="yellow"), soft_wrap=True)

        manifest = distill(
            inputs,
            args.reference,
            teacher,
            args.out,
            config,
            benchmarks,
            resources,
            on_plan,
            on_record,
            notify,
        )
    counts = manifest["counts"]
    dropped = ", ".join(f"{n} {why}" for why, n in counts["dropped"].items() if n) or "none"
    console.print(
        f"{counts['transcripts']} transcripts from {counts['distilled']} groups: {counts['kept']} kept "
        f"(keep rate {counts['keep_rate'] if counts['keep_rate'] is not None else '-'}), dropped: {dropped}; "
        f"{counts['rows']['train']} train rows, {counts['rows']['eval']} eval rows; "
        f"teacher tokens {manifest['tokens']['total_tokens']:,}",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        f"-> {args.out / 'sft.jsonl'}, {args.out / 'manifest.json'}", highlight=False, soft_wrap=True
    )
    if not counts["distilled"]:
        console.print(
            "[red]nothing distilled[/]: every group was refused or failed", highlight=False, soft_wrap=True
        )
    return 1 if counts["failed"] or not counts["distilled"] else 0


def register(subparsers: Any) -> None:
    """Add the `distill` command to the top-level parser's subparsers."""
    parser = subparsers.add_parser(
        "distill", help="grade groups with a teacher model, keep transcripts that agree with the reference"
    )
    parser.add_argument("inputs", nargs="+", type=Path, help="group files (JSON object, JSON array or JSONL)")
    parser.add_argument(
        "--reference",
        required=True,
        type=Path,
        help="reference file of any kind: pairwise, ranking, degrade output, consensus",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        help="output folder: sft.jsonl, sft_eval.jsonl, manifest.json, records/ (a rerun resumes)",
    )
    parser.add_argument(
        "--benchmark",
        action="append",
        type=Path,
        default=[],
        metavar="DIR",
        help="a benchmark folder (with manifest.json) whose groups and tasks are refused as training input; "
        "every one found under ./benchmarks is refused too",
    )
    parser.add_argument("--no-default-benchmarks", action="store_true", help="do not look under ./benchmarks")
    add_config_arguments(parser.add_argument_group("distillation"), DistillConfig)
    add_config_arguments(
        parser.add_argument_group("teacher (the llm grader)"), LLMConfig, only=TEACHER_FIELDS
    )
    add_config_arguments(parser.add_argument_group("resources (per process)"), Concurrency)
    parser.set_defaults(func=cmd_distill)
