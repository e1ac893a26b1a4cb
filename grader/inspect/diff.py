"""`gagar diff`: what distinguishes two candidates of a group.

Comparing the two patches as text says little (hunks shift, context differs); comparing the two patched trees
says exactly what one does that the other does not. So the group's workspace is rebuilt from the run's
groups.jsonl and git diffs candidate B's tree against candidate A's, limited to the files both touch; files
only one of them touches are shown apart, as that candidate's change against the base. The results add each
candidate's rank, weight and signals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grader.groups.models import GroupResult
from grader.inspect.run import Run, dumps_compact, fired_signals, rank_of
from grader.inspect.show import code_view, printable, signed
from grader.workspace.workspace import WorkspaceError, open_workspace


@dataclass
class Comparison:
    """Two candidates of one group. `diff` is None (with `note` saying why) when patches are unavailable."""

    group_id: str
    a: str
    b: str
    result: GroupResult
    files_a: list[str] = field(default_factory=list)
    files_b: list[str] = field(default_factory=list)
    diff: str | None = None
    only_diffs: dict[str, str] = field(
        default_factory=dict
    )  # trajectory id -> its diff of files only it touches
    note: str = ""

    @property
    def only_a(self) -> list[str]:
        return [f for f in self.files_a if f not in self.files_b]

    @property
    def only_b(self) -> list[str]:
        return [f for f in self.files_b if f not in self.files_a]

    @property
    def shared(self) -> list[str]:
        return [f for f in self.files_a if f in self.files_b]


def _files_from_results(result: GroupResult, tid: str) -> list[str]:
    report = result.trajectories.get(tid)
    return list(report.stats.files) if report and report.stats else []


def compare(run: Run, group_id: str, a: str, b: str) -> Comparison:
    """Compare candidates `a` and `b`; raises ValueError when the group or either trajectory is unknown."""
    result = run.result(group_id)
    known = set(result.trajectories) | set(result.advantages_before)
    for tid in (a, b):
        if tid not in known:
            raise ValueError(
                f"group {group_id!r} has no trajectory {tid!r}; it has {', '.join(sorted(known))}"
            )
    comparison = Comparison(
        group_id, a, b, result, _files_from_results(result, a), _files_from_results(result, b)
    )
    group = run.group(group_id)
    if group is None:
        comparison.note = run.patch_note(group_id)
        return comparison
    try:
        with open_workspace(group) as workspace:
            missing = [
                f"{tid}: {workspace.candidates[tid].error}"
                for tid in (a, b)
                if not workspace.candidates[tid].commit
            ]
            for tid, files in ((a, comparison.files_a), (b, comparison.files_b)):
                stats = workspace.candidates[tid].stats
                if stats is not None:
                    files[:] = list(stats.files)
            if missing:
                comparison.note = "no branch to compare: " + "; ".join(missing)
                return comparison
            # Between the two, only the shared files: a file one candidate alone touches would show as wholly
            # added or removed; its own change against the base says what that candidate did to it.
            shared = comparison.shared
            comparison.diff = workspace.diff(b, against=a, paths=shared) if shared else ""
            for tid, only in ((a, comparison.only_a), (b, comparison.only_b)):
                if only:
                    comparison.only_diffs[tid] = workspace.diff(tid, paths=only)
    except WorkspaceError as exc:
        comparison.note = f"patch not available: cannot rebuild the workspace: {exc}"
    return comparison


def render(console: Console, comparison: Comparison) -> None:
    c, result = comparison, comparison.result
    title = Text(f"{printable(c.group_id)}: ", style="bold")
    title.append(printable(c.a), style="bold cyan")
    title.append(" vs ")
    title.append(printable(c.b), style="bold magenta")
    console.print(title)
    console.print(_side_by_side(result, c.a, c.b))
    console.print()
    console.print(Text("Files", style="bold underline"))
    for label, files in ((f"only {c.a}", c.only_a), (f"only {c.b}", c.only_b), ("both", c.shared)):
        console.print(Text(printable(f"  {label}: {', '.join(files) or '-'}")))
    for tid in (c.a, c.b):
        if c.only_diffs.get(tid):
            console.print()
            console.print(Text(printable(f"Only {tid}: its change against the base"), style="bold underline"))
            console.print(code_view(c.only_diffs[tid]))
    console.print()
    console.print(Text(printable(f"Shared files: {c.b} against {c.a}"), style="bold underline"))
    if c.note:
        console.print(Text(printable(f"  {c.note}"), style="dim"))
    elif c.diff:
        console.print(code_view(c.diff))
    elif c.shared:
        console.print(Text("  identical in both", style="dim"))
    else:
        console.print(Text("  no file is touched by both", style="dim"))


def _side_by_side(result: GroupResult, a: str, b: str) -> Table:
    table = Table(show_edge=False, pad_edge=False)
    table.add_column("")
    table.add_column(Text(printable(a)), overflow="fold")
    table.add_column(Text(printable(b)), overflow="fold")
    ranks = rank_of(result)
    reports = [result.trajectories.get(a), result.trajectories.get(b)]

    def row(name: str, values: list[str]) -> None:
        table.add_row(name, *(Text(printable(v)) for v in values))

    row("passed", ["yes" if r and r.passed else "no" for r in reports])
    row("rank", [str(ranks.get(t, "-")) for t in (a, b)])
    row("weight", [f"{result.weights[t]:.3f}" if t in result.weights else "-" for t in (a, b)])
    row("advantage before", [signed(result.advantages_before.get(t)) for t in (a, b)])
    row("advantage after", [signed(result.advantages_after.get(t)) for t in (a, b)])
    row("apply", [(r.apply_method or r.error or "-") if r else "-" for r in reports])
    row("class", ["-" if not r or r.patch_class is None else str(r.patch_class) for r in reports])
    row(
        "+/-", [f"+{r.stats.lines_added} -{r.stats.lines_removed}" if r and r.stats else "-" for r in reports]
    )
    row("fired", [", ".join(fired_signals(r)) or "-" if r else "-" for r in reports])
    names = list(dict.fromkeys(k for r in reports if r for k in r.signals))
    for name in names:
        row(
            f"  {name}", [dumps_compact(r.signals[name]) if r and name in r.signals else "-" for r in reports]
        )
    row("rationale", [(r.rationale or "-") if r else "-" for r in reports])
    return table
