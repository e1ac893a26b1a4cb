"""`gagar bench check`, `gagar bench prepare` and `gagar bench bundle`: argument parsing and printing for
benchmarks of graders; the work is in `grader.evaluation.benchmark`, `probes` and `prepare`.

`register(subparsers)` adds the `bench` command group to gagar's parser (`grader.evaluation.cli` does).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from grader.cli.display import Display, cell
from grader.cli.options import command_group
from grader.errors import InputFileError
from grader.evaluation.benchmark import bundle_base_tree, load_benchmark
from grader.evaluation.prepare import (
    TRACKS,
    PrepareReport,
    SourceLocator,
    find_recipe,
    github_url,
    prepare,
    resolve_bench,
)
from grader.evaluation.recipe import load_recipe
from grader.util.atomic import write_text_atomic
from grader.workspace.sources import check_source_root, checked_repository


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def cmd_bench_check(args: argparse.Namespace) -> int:
    """`gagar bench check`: validate a benchmark, show its counts and label agreement, run its probes."""
    from grader.evaluation.probes import run_probes

    console = Console()
    bench = load_benchmark(resolve_bench(args.bench, args.track))
    counts = bench.counts()
    console.print(
        cell(
            f"benchmark {bench.name} ({bench.root}): {len(bench.groups)} groups, "
            f"{len(set(bench.instances.values()))} instances; dev {len(bench.group_ids('dev'))} groups, "
            f"test {len(bench.group_ids('test'))}"
            + (" [format example]" if bench.manifest.get("example") else "")
        ),
        highlight=False,
    )
    table = Table(title="reference pairs", show_edge=False, pad_edge=False)
    for column in ("by", "value", "pairs"):
        table.add_column(column, justify="right" if column == "pairs" else "left")
    for by in ("repository", "category", "kind", "split"):
        for value, number in sorted(counts[by].items()):
            table.add_row(by, cell(value), str(number))
    console.print(table)
    agreement = bench.agreement()
    left_out = ", ".join(f"{g}: {a} / {b}" for g, a, b in agreement.disagreed) or "none"
    console.print(
        cell(
            f"double labels: {agreement.agreed}/{agreement.pairs} pairs agreed ({_fmt(agreement.rate)}); "
            f"left out: {left_out}"
        ),
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
                cell(r.probe.group_id),
                cell(f"{r.probe.better} > {r.probe.worse}"),
                cell(r.probe.script.name),
                "yes" if r.holds else "NO",
                cell(r.summary()),
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
        console.print(cell(f"-> {args.out / 'check.json'}"), highlight=False)
    return 0 if holds else 1


def cmd_bench_prepare(args: argparse.Namespace) -> int:
    """`gagar bench prepare`: read a recipe's sources at their pinned commits, check every sha256 and write
    its tracks into the cache (grader.evaluation.prepare).

    Raises:
        InputFileError: no such recipe, or a --source that is not OWNER/NAME=PATH.
    """
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
    for root in args.source_root:  # a wrong folder or layout is named now, not after minutes of work
        check_source_root(root, recipe.repositories(), "--source-root")
    started = time.monotonic()
    with Display(f"prepare {recipe.name}") as display:
        locator = _ShownLocator(
            roots=list(args.source_root), given=given, online=not args.offline, display=display
        )

        def progress(what: str, done: int, total: int) -> None:
            display.update(what, done=done, total=total)

        result = prepare(recipe, locator, partial=args.partial, progress=progress)
    seconds = time.monotonic() - started
    out = Console(soft_wrap=True)  # paths whole, as a shell can take them
    for track, figures in result.tracks.items():
        out.print(
            cell(
                f"{recipe.name}/{track}: {figures['groups']} groups, {figures['candidates']} candidates, "
                f"{figures['pairs']} pairs -> {result.root / track}"
            ),
            highlight=False,
        )
    absent = [i for i in result.skipped if i not in result.unreadable]
    if absent:
        out.print(
            cell(
                f"{len(absent)} instances left out: their task repository is not here "
                f"(`gagar bench prepare {recipe.name} --list-sources`)",
                style="yellow",
            ),
            highlight=False,
        )
    for instance, why in sorted(result.unreadable.items()):
        out.print(cell(f"left out {instance}: its base tree cannot be read whole: {why}", style="yellow"))
    if "preference" not in result.tracks:
        out.print("preference track: no labelled pairs yet (references.jsonl is empty)", highlight=False)
    out.print(cell(summary_line(recipe.name, result, len(recipe.instances), seconds)), highlight=False)
    return 0


def summary_line(name: str, result: PrepareReport, instances: int, seconds: float) -> str:
    """The line `bench prepare` ends with: what it prepared, how long it took, what was resumed, where."""
    prepared = instances - len(result.skipped)
    tracks = ", ".join(result.tracks) or "no track"
    resumed = f"; {result.resumed} steps were already done (resumed)" if result.resumed else ""
    left = f", {len(result.skipped)} left out" if result.skipped else ""
    return (
        f"prepared {name} in {duration(seconds)}: {prepared} of {instances} instances{left}; "
        f"{tracks}{resumed} -> {result.root}"
    )


def duration(seconds: float) -> str:
    """`42 s` under two minutes, else `6 min 41 s`."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


@dataclass
class _ShownLocator(SourceLocator):
    """The locator, saying on the progress display which repository it looks for and which it clones."""

    display: Display | None = None

    def locate(self, repository: str) -> Path | None:
        if self.display is not None:
            self.display.update(f"looking for {repository}")
            if self.online and self.find(repository) is None:
                self.display.update(f"cloning {github_url(repository)} (no local copy)")
        return super().locate(repository)


def cmd_bench_bundle(args: argparse.Namespace) -> int:
    """`gagar bench bundle`: a base tree as a single-root-commit bundle, and its provenance record.

    Raises:
        InputFileError: --repository is not OWNER/NAME (a URL, say), or --out names a folder, not a file.
    """
    checked_repository(args.repository, "--repository")
    out = Path(args.out)  # kept a string until here: Path() drops the trailing / that says "a folder"
    if out.is_dir() or args.out.endswith(("/", os.sep)):
        raise InputFileError(f"--out {args.out}: a folder; give the bundle file to write (NAME.bundle)")
    record = bundle_base_tree(args.source, args.commit, out, args.repository)
    print(json.dumps({str(out): record}, indent=2))
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
        help="a folder of git copies (bare or not) of the repositories the recipe needs, laid out "
        "DIR/OWNER/NAME (DIR/OWNER__NAME is accepted too); checked at once (repeatable)",
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
    bundle.add_argument(
        "--repository", required=True, metavar="OWNER/NAME", help="the upstream repository, as OWNER/NAME"
    )
    bundle.add_argument(
        "--out", required=True, metavar="FILE", help="the bundle file to write (bundles/NAME.bundle)"
    )
    bundle.set_defaults(func=cmd_bench_bundle)
