"""`gagar show`: a run's summary, or one group's decision in full, in the terminal.

Everything printed from a run is untrusted (patches, model output, trajectory ids): it goes through
`printable` and is handed to rich as `Text` or `Syntax`, never as markup, so neither a `[bold]` in a
rationale nor an escape sequence in a patch can restyle or take over the reader's terminal.
"""

from __future__ import annotations

import io
import math
import os
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from grader.groups.models import GroupResult, LengthSignal
from grader.inspect.run import (
    Run,
    candidate_order,
    dumps_compact,
    fired_signals,
    group_flags,
    rank_of,
    summarize,
    tokens,
    top_candidates,
    weight_spread,
)
from grader.inspect.steps import Step, looks_like_diff, readable_steps
from grader.ranking.length import StepReading, read_step
from grader.util.terminal import printable

PIPED_WIDTH = 120  # piped output lands in files and pagers, where rich's 80-column default squeezes tables
SHORT_LINES = 12  # lines of a long message or tool result shown before "--full"
PATCH_LINES = 80
GROUP_ROWS = 30
ID_WIDTH = 48  # widest group id column in the summary before ids fold
BAR_HALF = 12  # characters of the advantage bar on each side of zero


def make_console(file: IO[str] | None = None, width: int | None = None) -> Console:
    """A console that colours a terminal and writes plain text anywhere else (rich decides, from the file)."""
    console = Console(file=file, highlight=False, width=width)
    if width is None and not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(file=file, highlight=False, width=PIPED_WIDTH)
    return console


@contextmanager
def output(stream: IO[str] | None = None) -> Iterator[Console]:
    """A console for the command's output: live on a terminal; elsewhere plain text, trailing spaces cut
    (rich pads every table cell and padded block to the full width, noise in a file or a diff)."""
    stream = stream if stream is not None else sys.stdout
    console = make_console(stream)
    if console.is_terminal:
        yield console
        return
    buffer = io.StringIO()
    yield make_console(buffer, width=console.width)
    stream.write("".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()))


def clipped(text: str, limit: int | None) -> tuple[str, int]:
    """The first `limit` lines of the text (all with None) and how many lines were left out."""
    lines = text.splitlines()
    if limit is None or len(lines) <= limit:
        return text, 0
    return "\n".join(lines[:limit]), len(lines) - limit


def code_view(text: str, limit: int | None = None) -> RenderableType:
    """A diff highlighted as one, anything else as plain text; cut to `limit` lines with a note."""
    shown, hidden = clipped(printable(text), limit)
    view: RenderableType
    if looks_like_diff(shown):
        view = Syntax(shown, "diff", theme="ansi_dark", word_wrap=True, background_color="default")
    else:
        view = Text(shown)
    if not hidden:
        return view
    return Group(view, Text(f"… {hidden} more lines (--full shows everything)", style="dim"))


def signed(value: float | None) -> str:
    """A signed number to 4 places; "-" for None, "NaN" for a NaN (results may carry one)."""
    if value is None:
        return "-"
    return "NaN" if math.isnan(value) else f"{value:+.4f}"


def _tau(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def length_summary(reading: StepReading) -> str:
    """One line on a run's length signal: mean Kendall taus and where lengths came from."""
    sources = ", ".join(
        f"{n} in {'tokens' if s == 'response_length' else 'patch lines (no response_length)'}"
        for s, n in sorted(reading.sources.items())
    )
    positive, negative = sum(t > 0 for t in reading.taus), sum(t < 0 for t in reading.taus)
    return (
        f"mean Kendall tau of weight with length {_tau(reading.mean(reading.taus))} "
        f"(advantage after {_tau(reading.mean(reading.advantage_taus))}), with patch size "
        f"{_tau(reading.mean(reading.patch_taus))}; rose/fell with length in {positive}/{negative} of "
        f"{reading.graded} graded groups ({sources}); `gagar trend` follows it across steps"
    )


def group_length_line(signal: LengthSignal) -> str:
    """One line on a group's length signal."""
    unit = "tokens" if signal.source == "response_length" else "patch lines (no response_length)"
    return (
        f"Kendall tau with length in {unit}: weight {_tau(signal.weight_vs_length)}, advantage after "
        f"{_tau(signal.advantage_vs_length)}; with patch size: weight {_tau(signal.weight_vs_patch_size)}, "
        f"advantage after {_tau(signal.advantage_vs_patch_size)}; mean length of the top tier "
        f"{signal.top_length:g}, of the bottom tier {signal.bottom_length:g}"
    )


# -- the run -------------------------------------------------------------------------------------------------


def render_summary(console: Console, run: Run, limit: int | None = GROUP_ROWS) -> None:
    summary = summarize(run.results)
    console.print(Text(f"run {printable(str(run.directory))}", style="bold"))
    counts = ", ".join(f"{summary.statuses[s]} {s}" for s in ("graded", "skipped", "failed"))
    console.print(Text(f"  groups: {summary.groups} ({counts})"))
    graders = ", ".join(f"{name} ({n})" for name, n in summary.graders.most_common()) or "-"
    line = f"  grader: {graders}"
    if summary.models:
        line += "; model " + ", ".join(f"{m} ({n})" for m, n in summary.models.most_common())
    console.print(Text(printable(line)))
    if summary.requests or summary.tokens:
        console.print(
            Text(
                f"  tokens: {summary.tokens:,} in {summary.requests:,} requests "
                f"({summary.retries:,} retries), {summary.tool_calls:,} tool calls; prompt tokens "
                f"{summary.prompt_tokens:,}, of which {summary.cached_prompt_tokens:,} cached"
            )
        )
    slowest = (
        f", slowest {summary.slowest[0]:.2f}s ({printable(summary.slowest[1])})" if summary.slowest else ""
    )
    console.print(Text(f"  time: {summary.seconds:.2f}s over all groups{slowest}"))
    stats = summary.spread_stats()
    if stats:
        console.print(
            Text(
                f"  weight spread (best - worst weight) over {len(summary.spreads)} graded group(s): "
                f"min {stats['min']:.3f}, median {stats['median']:.3f}, mean {stats['mean']:.3f}, "
                f"max {stats['max']:.3f}"
            )
        )
    reading = read_step(str(run.directory), run.results)
    if reading.graded:
        console.print(Text(f"  credit vs length: {length_summary(reading)}"))
    for reason, n in summary.identity.most_common(3):
        console.print(Text(printable(f"  redistribution left {n} graded group(s) unchanged: {reason}")))
    flags = summary.top_flags()
    if flags:
        console.print(Text("  most frequent flags:"))
        for name, candidates, groups in flags:
            console.print(Text(printable(f"    {name}: {candidates} candidate(s) in {groups} group(s)")))
    learnt = Counter(
        str(lesson)
        for result in run.results
        if isinstance(result.details.get("endpoint"), list)
        for lesson in result.details["endpoint"]
    )
    for lesson, n in learnt.most_common():  # what the endpoint refused, and what was sent instead
        console.print(Text(printable(f"  endpoint learnt ({n} group(s)): {lesson}"), style="yellow"))
    if summary.failures:
        console.print(Text("  failures:"))
        for reason, n in summary.failures.most_common(5):
            console.print(Text(printable(f"    {n} x {reason}")))
    if run.groups is None and not run.group_problems:
        console.print(Text("  patches: not available (no groups.jsonl in the run directory)", style="dim"))
    for problem in run.group_problems[:3]:
        console.print(Text(printable(f"  groups.jsonl: {problem}"), style="yellow"))
    _group_table(console, run, limit)


def _group_table(console: Console, run: Run, limit: int | None) -> None:
    results = run.results
    # The failed groups are what a reader looks for first; list them before the rest when cutting.
    ordered = [r for r in results if r.status == "failed"] + [r for r in results if r.status != "failed"]
    shown = ordered if limit is None else ordered[:limit]
    # Columns that would say the same on every line (one grader, no tokens) are left to the summary above.
    graders = len({r.grader for r in results}) > 1
    costs = any(tokens(r) for r in results)
    table = Table(show_edge=False, pad_edge=False)
    # Ids are what a reader copies into `gagar show RUN GROUP`: kept whole on one line where they fit.
    longest = max((len(r.group_id) for r in shown), default=5)
    table.add_column("group", overflow="fold", min_width=min(longest, ID_WIDTH))
    table.add_column("status")
    if graders:
        table.add_column("grader", overflow="fold")
    table.add_column("cand.", justify="right", no_wrap=True)
    table.add_column("top", overflow="fold")
    table.add_column("spread", justify="right", no_wrap=True)
    table.add_column("flags", overflow="fold")
    table.add_column("seconds", justify="right", no_wrap=True)
    if costs:
        table.add_column("tokens", justify="right", no_wrap=True)
    for result in shown:
        spread = weight_spread(result)
        cells: list[RenderableType] = [
            Text(printable(result.group_id)),
            Text(result.status, style=_status_style(result.status)),
        ]
        if graders:
            cells.append(Text(printable(result.grader)))
        cells += [
            str(sum(1 for r in result.trajectories.values() if r.passed)),
            Text(printable(", ".join(top_candidates(result)) or "-")),
            "-" if spread is None else f"{spread:.3f}",
            Text(printable(", ".join(group_flags(result)) or "-")),
            f"{result.seconds:.2f}",
        ]
        if costs:
            cells.append(f"{tokens(result):,}" if tokens(result) else "-")
        table.add_row(*cells)
    console.print()
    console.print(table)
    if len(shown) < len(results):
        console.print(Text(f"… {len(results) - len(shown)} more groups (--limit 0 lists all)", style="dim"))
    console.print(
        Text(f"one group in full: gagar show {printable(str(run.directory))} GROUP_ID", style="dim")
    )


def _status_style(status: str) -> str:
    return {"graded": "green", "skipped": "yellow", "failed": "red"}.get(status, "")


# -- one group -----------------------------------------------------------------------------------------------


def render_group(console: Console, run: Run, group_id: str, full: bool = False) -> None:
    result = run.result(group_id)
    header = Text()
    header.append(printable(result.group_id), style="bold")
    header.append(f": {result.status}", style=_status_style(result.status))
    header.append(f" by {printable(result.grader)} in {result.seconds:.2f}s")
    console.print(header)
    if result.reason:
        console.print(Text(printable(f"  reason: {result.reason}")))
    if result.redistribution:
        console.print(Text(printable(f"  redistribution: {result.redistribution}")))
    if result.length is not None:
        console.print(Text(f"  credit vs length: {group_length_line(result.length)}"))
    details = {k: result.details[k] for k in ("model", "seed", "confidence") if k in result.details}
    if details:
        console.print(
            Text(printable("  " + ", ".join(f"{k} {dumps_compact(v)}" for k, v in details.items())))
        )
    if result.usage:
        usage = ", ".join(f"{k} {v:,}" for k, v in result.usage.items())
        console.print(Text(f"  usage: {usage}"))
    lessons = result.details.get("endpoint")
    for lesson in lessons if isinstance(lessons, list) else []:  # what the endpoint refused, and instead
        console.print(Text(printable(f"  endpoint learnt: {lesson}"), style="yellow"))
    for tid, hits in result.flags.items():
        for hit in hits:
            console.print(Text(printable(f"  injection flagged in {tid}: {hit}"), style="bold red"))
    if not candidate_order(result):  # a file entry that never became a group: the reason is all there is
        console.print(Text("  no trajectories: the group was not loaded", style="dim"))
        return

    console.print()
    console.print(Text("Candidates", style="bold underline"))
    console.print(_candidates_table(result))

    if result.ranking:
        console.print()
        console.print(Text("Ranking", style="bold underline"))
        for rank, tier in enumerate(result.ranking, start=1):
            for tid in tier:
                report = result.trajectories.get(tid)
                weight = result.weights.get(tid)
                line = Text(f"  {rank}. ", style="bold")
                line.append(printable(tid), style="bold")
                line.append(f"  weight {weight:.3f}" if weight is not None else "")
                console.print(line)
                if report and report.rationale:
                    console.print(Padding(Text(printable(report.rationale)), (0, 0, 0, 5), expand=False))

    console.print()
    console.print(Text("Advantages", style="bold underline"))
    console.print(_advantages_table(result))

    console.print()
    console.print(Text("Patches", style="bold underline"))
    note = run.patch_note(result.group_id)
    if note:
        console.print(Text(printable(f"  {note}"), style="dim"))
    else:
        patch_limit = None if full else PATCH_LINES
        for tid in candidate_order(result):
            patch = run.patch(result.group_id, tid)
            if patch is None:
                continue
            console.print(Text(f"── {printable(tid)} ", style="bold"))
            console.print(
                code_view(patch, patch_limit) if patch.strip() else Text("(empty patch)", style="dim")
            )

    if result.transcript is not None or result.grader == "llm":
        console.print()
        console.print(Text("Transcript", style="bold underline"))
        reading = run.read_transcript(result)
        steps, note = (None, reading.note)
        if reading.events is not None:
            steps, note = readable_steps(reading.events, reading.path)
        if steps is None:
            console.print(Text(printable(f"  {note}"), style="dim" if "not found" in note else "yellow"))
        else:
            for step in steps:
                _render_step(console, step, full)


def _candidates_table(result: GroupResult) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for column in ("trajectory", "passed", "rank", "apply", "class", "files", "+/-", "signals"):
        table.add_column(column, justify="right" if column in ("rank", "class", "+/-") else "left")
    ranks = rank_of(result)
    for tid in candidate_order(result):
        report = result.trajectories.get(tid)
        if report is None:
            table.add_row(Text(printable(tid)), "?", "-", "-", "-", "-", "-", "-")
            continue
        stats = report.stats
        files = "\n".join(stats.files) if stats and stats.files else "-"
        signals = ", ".join(fired_signals(report))
        scores = [f"{k} {v:g}" for k, v in report.signals.items() if isinstance(v, float)]
        table.add_row(
            Text(printable(tid)),
            Text("yes" if report.passed else "no", style="green" if report.passed else "red"),
            str(ranks.get(tid, "-")),
            Text(printable(report.apply_method or report.error or "-"), style="red" if report.error else ""),
            "-" if report.patch_class is None else str(report.patch_class),
            Text(printable(files)),
            f"+{stats.lines_added} -{stats.lines_removed}" if stats else "-",
            Text(printable("; ".join(filter(None, [signals, ", ".join(scores)])) or "-")),
        )
    return table


def _advantages_table(result: GroupResult) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for column in ("trajectory", "weight", "before", "after", "change", ""):
        table.add_column(column, justify="left" if column in ("trajectory", "") else "right")
    every = [*result.advantages_before.values(), *result.advantages_after.values()]
    values = [abs(v) for v in every if v and math.isfinite(v)]  # a NaN or inf advantage gets no bar
    scale = max(values, default=1.0) or 1.0
    for tid in candidate_order(result):
        before, after = result.advantages_before.get(tid), result.advantages_after.get(tid)
        change = after - before if before is not None and after is not None else None
        weight = result.weights.get(tid)
        bar = Text()
        if after is not None and math.isfinite(after):  # around a zero axis: readable without colour too
            length = max(1, round(abs(after) / scale * BAR_HALF))
            left = "█" * length if after < 0 else ""
            bar.append(left.rjust(BAR_HALF), style="red")
            bar.append("│")
            bar.append("█" * length if after >= 0 else "", style="green")
        table.add_row(
            Text(printable(tid)),
            "-" if weight is None else "NaN" if math.isnan(weight) else f"{weight:.3f}",
            signed(before),
            signed(after),
            signed(change),
            bar,
        )
    return table


def _limit(text: str, full: bool) -> int | None:
    # Diffs are what a reader follows the grader through, so they get far more room than other output.
    if full:
        return None
    return PATCH_LINES if looks_like_diff(text) else SHORT_LINES


def _render_step(console: Console, step: Step, full: bool) -> None:
    when = f"{step.t:7.3f}s " if isinstance(step.t, int | float) else " " * 9
    console.print(Text(when + printable(step.title), style="bold red" if step.problem else "bold"))
    # The system prompt is the same in every transcript: its first lines are enough unless asked for.
    body_limit = 4 if step.kind == "system" and not full else _limit(step.body, full)
    if step.body:
        console.print(Padding(code_view(step.body, body_limit), (0, 0, 0, 10), expand=False))
    for call in step.calls:
        line = Text("→ ")
        line.append(printable(call.name), style="cyan")
        line.append(printable(f"({call.arguments})"))
        if call.seconds is not None:
            line.append(f"  {call.seconds:.3f}s", style="dim")
        if call.error:
            line.append("  error", style="bold red")
        console.print(Padding(line, (0, 0, 0, 10), expand=False))
        if call.result is None:
            console.print(Text(" " * 12 + "(no result recorded)", style="dim"))
        else:
            console.print(
                Padding(code_view(call.result, _limit(call.result, full)), (0, 0, 0, 12), expand=False)
            )
