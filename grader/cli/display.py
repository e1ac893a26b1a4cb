"""What the commands show while they work: a progress bar that can never cost a result, and untrusted text as
plain text.

Ids, reasons and paths come from group files, recipes and models. Given to rich as a `str`, `[/x]` is read
as a closing markup tag (a `MarkupError` that ended `gagar grade` before `results.jsonl` was written) and an
escape sequence reaches the terminal raw. `cell` makes such text a `rich.text.Text` with control characters
spelled out; `Display` is the progress bar every long command shows, and any failure of its own is reported
once and then ignored, so the work (and what it writes) goes on without it.
"""

from __future__ import annotations

import contextlib
import sys
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from grader.util.terminal import printable_line


def cell(value: object, style: str = "") -> Text:
    """`value` as one line of plain text for a table cell or a message: never markup, control and bidi
    characters spelled out (`\\x1b`), newlines and tabs too.

    Args:
        value: any value; `str()` of it is shown.
        style: a rich style for the whole text (gagar's own choice, never the value's).

    Returns:
        The text to give rich.
    """
    return Text(printable_line(str(value)), style=style)


class Display:
    """A progress bar on stderr (`what`, a bar, done/total, elapsed time, the latest step as plain text),
    used as a context manager around work that must not depend on it.

    Every call into rich is guarded: the first exception it raises (a terminal gone, a rendering bug) is
    reported on stderr in one line naming the cause, the bar is dropped, and later calls do nothing. The
    work's results are the caller's to write, never the display's.
    """

    def __init__(self, what: str, total: int | None = None, *, enabled: bool = True) -> None:
        """Args:
        what: the label before the bar ("grading", "prepare swebench-lite").
        total: steps to do, when known (`update` can set it later).
        enabled: False shows nothing (one group needs no bar).
        """
        self.failed: str | None = None
        """Why the display stopped (its exception, one line), or None while it works."""
        self._progress: Progress | None = None
        self._task: Any = None
        if not enabled:
            return
        self._progress = Progress(
            TextColumn(printable_line(what), markup=False),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[last]}", markup=False),
            console=Console(stderr=True),
            transient=True,
        )
        self._guard(lambda progress: setattr(self, "_task", progress.add_task(what, total=total, last="")))

    def _guard(self, call: Any) -> None:
        if self._progress is None:
            return
        try:
            call(self._progress)
        except Exception as exc:  # noqa: BLE001 - whatever breaks the display, the work goes on without it
            self._drop(exc)

    def _drop(self, exc: BaseException) -> None:
        progress, self._progress = self._progress, None
        self.failed = printable_line(f"{type(exc).__name__}: {exc}")
        if progress is not None:
            with contextlib.suppress(Exception):  # a broken display may fail to stop as well
                progress.stop()
        # stderr itself may be gone (a closed terminal): then nothing can be shown.
        with contextlib.suppress(OSError, ValueError):
            print(f"note: progress display stopped ({self.failed}); the work goes on", file=sys.stderr)

    def __enter__(self) -> Display:
        self._guard(lambda progress: progress.start())
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._guard(lambda progress: progress.stop())

    def update(
        self, last: str | None = None, *, advance: int = 0, done: int | None = None, total: int | None = None
    ) -> None:
        """Move the bar: `advance` steps, or to `done` of `total`; `last` (untrusted, shown as plain text)
        replaces the latest-step field when given."""
        fields: dict[str, Any] = {"advance": advance}
        if last is not None:
            fields["last"] = printable_line(last)
        if done is not None:
            fields["completed"] = done
        if total is not None:
            fields["total"] = total
        self._guard(lambda progress: progress.update(self._task, **fields))

    def note(self, message: Text | str) -> None:
        """Print a line above the bar (plain text when given a `str`)."""
        text = message if isinstance(message, Text) else cell(message)
        if self._progress is None:
            Console(stderr=True).print(text, soft_wrap=True, highlight=False)
            return
        self._guard(lambda progress: progress.console.print(text, soft_wrap=True, highlight=False))
