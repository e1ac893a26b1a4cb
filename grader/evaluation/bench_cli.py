"""`gagar bench check`, `gagar bench prepare` and `gagar bench bundle`: argument parsing and printing for
benchmarks of graders; the work is in `grader.evaluation.benchmark`, `probes` and `prepare`.

`register(subparsers)` adds the `bench` command group to gagar's parser (`grader.evaluation.cli` does).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from grader.cli.options import command_group
from grader.errors import InputFileError
from grader.evaluation.benchmark import bundle_base_tree, load_benchmark
from grader.evaluation.prepare import TRACKS, SourceLocator, find_recipe, prepare, resolve_bench
from grader.evaluation.recipe import load_recipe
from grader.util.atomic import write_text_atomic


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def cmd_bench_check(args: argparse.Namespace) -> int:
    """`gagar bench check`: validate a benchmark, show its counts and label agreement, run its probes."""
    from grader.evaluation.probes import run_probes

    console = Console()
    bench = load_benchmark(resolve_bench(args.bench, args.track))
    counts = bench.counts()
    console.print(
        f"benchmark {bench.name} ({bench.root}): {len(bench.groups)} groups, "
        f"{len(set(bench.instances.values()))} instances; dev {len(bench.group_ids('dev'))} groups, "
        f"test {len(bench.group_ids('test'))}"
        + (" [format example]" if bench.manifest.get("example") else ""),
        highlight=False,
    )
    table = Table(title="reference pairs", show_edge=False, pad_edge=False)
    for column in ("by", "value", "pairs"):
        table.add_column(column, justify="right" if column == "pairs" else "left")
    for by in ("repository", "category", "kind", "split"):
        for value, number in sorted(counts[by].items()):
            table.add_row(by, value, str(number))
    console.print(table)
    agreement = bench.agreement()
    console.print(
        f"double labels: {agreement.agreed}/{agreement.pairs} pairs agreed ({_fmt(agreement.rate)}); "
        f"left out: {', '.join(f'{g}: {a} / {b}' for g, a, b in agreement.disagreed) or 'none'}",
        highlight=False,
    )
    report: dict[str, Any] = {
        "name": bench.name,
        "counts": {by: dict(counter) for by, counter in counts.items()},
        "label_agreement": {"pairs": agreement.pairs, "agreed": agreement.agreed, "rate": agreement.rate},
    }
    holds = True
    if not args.no_probes and bench.probes:
        results = run_probes(bench, backend=args.backend)
        probes = Table(title=f"probes ({args.backend} sandbox)", show_edge=False, pad_edge=False)
        for column in ("group", "better > worse", "probe", "holds", "result"):
            probes.add_column(column)
        for r in results:
            probes.add_row(
                r.probe.group_id,
                f"{r.probe.better} > {r.probe.worse}",
                r.probe.script.name,
                "yes" if r.holds else "NO",
                r.summary(),
            )
        console.print(probes)
        holds = all(r.holds for r in results)
        report["probes"] = [
            {
                "group_id": r.probe.group_id,
                "better": r.probe.better,
                "worse": r.probe.worse,
                "script": str(r.probe.script.relative_to(bench.root)),
                "holds": r.holds,
                "result": r.summary(),
                "better_output": r.better.to_dict() if r.better else None,
                "worse_output": r.worse.to_dict() if r.worse else None,
            }
            for r in results
        ]
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        write_text_atomic(args.out / "check.json", json.dumps(report, indent=2) + "\n")
        console.print(f"-> {args.out / 'check.json'}", highlight=False)
    return 0 if holds else 1


def cmd_bench_prepare(args: argparse.Namespace) -> int:
    """`gagar bench prepare`: read a recipe's sources at their pinned commits, check every sha256 and write
    its tracks into the cache (grader.evaluation.prepare).

    Raises:
        InputFileError: no such recipe, or a --source that is not OWNER/NAME=PATH.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    recipe_dir = find_recipe(args.bench)
    if recipe_dir is None:
        raise InputFileError(
            f"no recipe {args.bench!r} (a folder with recipe.json) in {args.bench} or the benchmark folders"
        )
    recipe = load_recipe(recipe_dir)
    if args.list_sources:
        print("\n".join(recipe.repositories()))
        return 0
    given: dict[str, Path] = {}
    for item in args.source:
        repository, sep, path = item.partition("=")
        if not sep or repository.count("/") != 1:
            raise InputFileError(f"--source {item!r}: give OWNER/NAME=PATH")
        given[repository] = Path(path)
    locator = SourceLocator(roots=list(args.source_root), given=given, online=not args.offline)
    console = Console(stderr=True)
    with Progress(
        TextColumn("prepare {task.fields[name]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("prepare", total=None, name=recipe.name, last="locating sources")

        def progress(what: str, done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, last=what)

        result = prepare(recipe, locator, partial=args.partial, progress=progress)
    out = Console()
    for track, figures in result.tracks.items():
        out.print(
            f"{recipe.name}/{track}: {figures['groups']} groups, {figures['candidates']} candidates, "
            f"{figures['pairs']} pairs -> {result.root / track}",
            highlight=False,
        )
    if result.resumed:
        out.print(f"{result.resumed} steps were already done (resumed)", highlight=False)
    absent = [i for i in result.skipped if i not in result.unreadable]
    if absent:
        out.print(
            f"[yellow]{len(absent)} instances left out: their task repository is not here "
            f"(`gagar bench prepare {recipe.name} --list-sources`)[/]",
            highlight=False,
        )
    for instance, why in sorted(result.unreadable.items()):
        out.print(
            f"[yellow]left out {instance}: its base tree cannot be read whole: {why}[/]", highlight=False
        )
    if "preference" not in result.tracks:
        out.print("preference track: no labelled pairs yet (references.jsonl is empty)", highlight=False)
    return 0


def cmd_bench_bundle(args: argparse.Namespace) -> int:
    """`gagar bench bundle`: a base tree as a single-root-commit bundle, and its provenance record."""
    record = bundle_base_tree(args.source, args.commit, args.out, args.repository)
    print(json.dumps({str(args.out): record}, indent=2))
    return 0


def register(subparsers: Any) -> None:
    """Add the `bench` commands (check, prepare, bundle) to the top-level parser's subparsers."""
    bench_commands = command_group(
        subparsers, "bench", "grader benchmarks: check one (format, counts, probes)"
    )
    check = bench_commands.add_parser(
        "check", help="validate a benchmark, show its counts and label agreement, run every probe on its pair"
    )
    check.add_argument("bench", metavar="NAME_OR_PATH", help="a benchmark folder or name (see eval --bench)")
    check.add_argument("--backend", default="docker", help="sandbox backend the probes run in")
    check.add_argument("--no-probes", action="store_true", help="validate and count only")
    check.add_argument("--out", type=Path, help="also write check.json there")
    check.add_argument("--track", choices=TRACKS, help="a prepared recipe's track (default preference)")
    check.set_defaults(func=cmd_bench_check)
    prep = bench_commands.add_parser(
        "prepare",
        help="materialize a recipe benchmark into the cache from its public sources, checking every sha256",
    )
    prep.add_argument("bench", metavar="NAME_OR_PATH", help="a recipe folder or name (benchmarks/NAME)")
    prep.add_argument(
        "--source-root",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="a folder holding source repositories as OWNER/NAME git dirs, bare or not (repeatable)",
    )
    prep.add_argument(
        "--source",
        action="append",
        default=[],
        metavar="OWNER/NAME=PATH",
        help="one source repository's local git copy (repeatable)",
    )
    prep.add_argument(
        "--list-sources", action="store_true", help="print every OWNER/NAME the recipe needs and exit"
    )
    prep.add_argument(
        "--offline",
        action="store_true",
        help="never clone a missing source from https://github.com/OWNER/NAME",
    )
    prep.add_argument(
        "--partial",
        action="store_true",
        help="prepare the instances whose task repository is here and list the others",
    )
    prep.set_defaults(func=cmd_bench_prepare)
    bundle = bench_commands.add_parser(
        "bundle", help="write a base tree as a bundle of one root commit; print its provenance record"
    )
    bundle.add_argument("source", type=Path, help="a local git repository holding the base commit")
    bundle.add_argument("commit", help="the upstream base commit")
    bundle.add_argument("--repository", required=True, help="the upstream repository's name (owner/name)")
    bundle.add_argument("--out", required=True, type=Path, help="the bundle to write (NAME/bundles/X.bundle)")
    bundle.set_defaults(func=cmd_bench_bundle)
