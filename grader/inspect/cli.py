"""The `show`, `report`, `trend` and `diff` subcommands of `gagar`: argument parsing and printing only.

`register(subparsers)` adds them to gagar's parser; `main` runs them on their own
(`python -m grader.inspect.cli`),
which is also how they are tested without the rest of the CLI.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grader.inspect import diff, show, trend
from grader.inspect.report import REPORT, write_report
from grader.inspect.run import load_run
from grader.ranking import length
from grader.ranking.length import RewardingLength


def cmd_show(args: argparse.Namespace) -> int:
    run = load_run(args.run_dir)
    if args.group_id is not None:
        run.result(args.group_id)  # an unknown group is an error before anything is printed
    with show.output() as console:
        if args.group_id is None:
            show.render_summary(console, run, limit=args.limit or None)
        else:
            show.render_group(console, run, args.group_id, full=args.full)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    path = write_report(args.run_dir, args.output)
    size = path.stat().st_size
    seconds = time.perf_counter() - start
    took = f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"
    print(f"wrote {path} ({size / 1024:,.0f} KiB in {took}); open it in a browser")
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    comparison = diff.compare(load_run(args.run_dir), args.group_id, args.a, args.b)
    with show.output() as console:
        diff.render(console, comparison)
    return 0


def cmd_trend(args: argparse.Namespace) -> int:
    rule = RewardingLength(window=args.window, min_mean_tau=args.min_tau, max_p=args.max_p)
    steps = trend.read_steps(args.run_dirs)
    with show.output() as console:
        warning = trend.render(console, steps, rule)
    return 3 if warning is not None and args.strict else 0


def register(subparsers: Any) -> None:
    """Add `show`, `report`, `trend` and `diff` to an argparse subparsers object (gagar's `build_parser`)."""
    parser = subparsers.add_parser("show", help="summarize a run, or show one group's decision in full")
    parser.add_argument("run_dir", type=Path, help="a run folder: the --out of gagar grade or gagar eval")
    parser.add_argument("group_id", nargs="?", help="a group to show in full (default: the run summary)")
    parser.add_argument(
        "--full", action="store_true", help="print long messages, tool results and patches whole"
    )
    parser.add_argument(
        "--limit", type=int, default=show.GROUP_ROWS, help="groups listed in the summary (0: all)"
    )
    parser.set_defaults(func=cmd_show)

    parser = subparsers.add_parser("report", help="write a run as one self-contained HTML file")
    parser.add_argument("run_dir", type=Path, help="a run folder: the --out of gagar grade or gagar eval")
    parser.add_argument("-o", "--output", type=Path, help=f"where to write it (default: RUN_DIR/{REPORT})")
    parser.set_defaults(func=cmd_report)

    parser = subparsers.add_parser(
        "trend", help="the length-growth monitor across training steps (one run directory per step)"
    )
    parser.add_argument(
        "run_dirs",
        type=Path,
        nargs="+",
        metavar="RUN_DIR",
        help="run directories, in step order (mind that a shell glob puts run-10 before run-2)",
    )
    parser.add_argument(
        "--window", type=int, default=length.WINDOW, help="steps the warning looks back over (0: all)"
    )
    parser.add_argument(
        "--min-tau",
        type=float,
        default=length.MIN_MEAN_TAU,
        help="mean Kendall tau(weight, length) over the window at or above which it warns",
    )
    parser.add_argument(
        "--max-p",
        type=float,
        default=length.MAX_SIGN_P,
        help="sign-test p-value (groups with positive vs negative tau) below which it warns",
    )
    parser.add_argument("--strict", action="store_true", help="exit with status 3 when it warns")
    parser.set_defaults(func=cmd_trend)

    parser = subparsers.add_parser("diff", help="what distinguishes two candidates of a group")
    parser.add_argument("run_dir", type=Path, help="a run folder: the --out of gagar grade or gagar eval")
    parser.add_argument("group_id")
    parser.add_argument("a", help="trajectory id")
    parser.add_argument("b", help="trajectory id, compared against A")
    parser.set_defaults(func=cmd_diff)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gagar", description="inspect a gagar run")
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:  # as gagar's own main does: a message, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
