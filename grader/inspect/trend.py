"""`gagar trend`: the length-growth monitor across training steps, one run directory per step.

For each step: how many graded groups carry a length signal, the mean length of their top- and bottom-ranked
trajectories, and the mean Kendall tau of credit with length and with patch size; then the warning rule of
`grader.ranking.length.RewardingLength` over the last steps.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grader.inspect.run import load_run
from grader.inspect.show import printable
from grader.ranking.length import RewardingLength, StepReading, read_step

UNITS = {"response_length": "tokens", "patch_size": "patch lines"}


def read_steps(run_dirs: Sequence[Path | str]) -> list[StepReading]:
    """Read each run directory as one step, in the order given.

    Args:
        run_dirs: run directories of `gagar grade --out`, in step order.

    Returns:
        One reading per directory, named by its path under the directory they all share.

    Raises:
        FileNotFoundError: when a directory has no results.jsonl.
        ValueError: when a line of one is not a result.
    """
    paths = [Path(path) for path in run_dirs]
    # Steps are named by what tells them apart: their paths under the directory they share.
    common = Path(os.path.commonpath([p.resolve() for p in paths])) if len(paths) > 1 else None
    steps = []
    for path in paths:
        name = str(path.resolve().relative_to(common)) if common and path.resolve() != common else str(path)
        steps.append(read_step(name, load_run(path).results))
    return steps


def _number(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.2f}" if signed else f"{value:.1f}"


def render(console: Console, steps: Sequence[StepReading], rule: RewardingLength) -> str | None:
    """Print the steps' table and the rule's verdict; return the warning (None when it did not fire).

    Args:
        console: where to print.
        steps: the readings, in step order.
        rule: the warning rule.

    Returns:
        The warning line, or None.
    """
    table = Table(show_edge=False, pad_edge=False)
    columns = ["step", "run", "graded", "length in", "top len", "bottom len", "tau w~len", "tau adv~len"]
    columns += ["tau w~patch", "+/-"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("run", "length in") else "right")
    for number, step in enumerate(steps, start=1):
        units = ", ".join(f"{UNITS[s]} ({n})" for s, n in sorted(step.sources.items())) or "-"
        positive, negative = sum(t > 0 for t in step.taus), sum(t < 0 for t in step.taus)
        table.add_row(
            str(number),
            Text(printable(step.name)),
            str(step.graded),
            units,
            _number(step.mean(step.top_lengths)),
            _number(step.mean(step.bottom_lengths)),
            _number(step.mean(step.taus), signed=True),
            _number(step.mean(step.advantage_taus), signed=True),
            _number(step.mean(step.patch_taus), signed=True),
            f"{positive}/{negative}",
        )
    console.print(table)
    console.print(
        Text(
            "tau: Kendall's tau-b per graded group over its ranked trajectories, averaged over the step; "
            "w = weight, adv = advantage after redistribution; "
            "+/-: groups where credit rose / fell with length",
            style="dim",
        )
    )
    fired, text = rule.verdict(steps)
    console.print(Text(printable(f"WARNING: {text}" if fired else text), style="bold red" if fired else ""))
    return text if fired else None
