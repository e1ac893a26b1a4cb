"""An independent hunk applier: what a file should become under a patch, computed without git.

`git apply`'s tolerant methods (3-way merge, whitespace-insensitive matching, reduced context) decide for
themselves where a hunk belongs. The workspace checks each file they produce against this applier's result,
and records what had to be tolerated. The applier follows the rules those methods promise, written here from
their documentation rather than git's code:

- hunks apply in order, each at the position nearest the one its header names (shifted by what the earlier
  hunks added and removed) where its old lines match;
- matching is tried exactly, then ignoring changes in the amount of whitespace (a run of whitespace matches
  any other run, line endings are ignored; "a b" still differs from "ab"), then with up to `max_fuzz` lines of
  leading and trailing context left unmatched;
- where a line matched only up to whitespace, or was left unmatched, the file's own line is kept: only
  removed lines go and only added lines come from the patch.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from unidiff import PatchedFile
from unidiff.patch import Hunk

from grader.errors import PatchError


@dataclass(frozen=True)
class _Line:
    kind: str  # " ", "-" or "+"
    text: str  # with its line ending, or without one at a missing final newline


def split_lines(text: str) -> list[str]:
    """`text` cut after each "\\n" only (str.splitlines also cuts at form feeds and other separators)."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _hunk_lines(hunk: Hunk) -> list[_Line]:
    """The hunk's lines, with the newline taken off a line that the diff marks "\\ No newline"."""
    lines: list[_Line] = []
    for line in hunk:
        if line.line_type == "\\":
            if lines and lines[-1].text.endswith("\n"):
                lines[-1] = _Line(lines[-1].kind, lines[-1].text[:-1])
            continue
        if line.line_type in (" ", "-", "+"):
            lines.append(_Line(line.line_type, line.value))
    return lines


def _loose(text: str) -> str:
    return re.sub(r"\s+", " ", text.rstrip("\r\n"))


def _positions(hint: int, size: int, length: int) -> Iterator[int]:
    """Start positions for `length` old lines in an image of `size` lines, nearest to `hint` first."""
    last = size - length
    hint = min(max(hint, 0), max(last, 0))
    yield hint
    for step in range(1, max(hint, last - hint) + 1):
        if hint - step >= 0:
            yield hint - step
        if hint + step <= last:
            yield hint + step


@dataclass
class _Placement:
    at: int
    trim_lead: int
    trim_tail: int
    loose: bool


def _place(image: list[str], lines: list[_Line], hint: int, max_fuzz: int) -> _Placement | None:
    """Where the hunk's old lines are: the least tolerance first, then the position nearest `hint`."""
    lead = next((i for i, line in enumerate(lines) if line.kind != " "), len(lines))
    tail = next((i for i, line in enumerate(reversed(lines)) if line.kind != " "), len(lines))
    trims = {(a, b) for a in range(max_fuzz + 1) for b in range(max_fuzz + 1) if a <= lead and b <= tail}
    loose_image: list[str] | None = None
    for trim_lead, trim_tail in sorted(trims, key=lambda ab: (max(ab), sum(ab), ab)):
        old = [line.text for line in lines[trim_lead : len(lines) - trim_tail] if line.kind != "+"]
        for loose in (False, True):
            if loose:
                loose_image = loose_image or [_loose(text) for text in image]
                searched, wanted = loose_image, [_loose(text) for text in old]
            else:
                searched, wanted = image, old
            for at in _positions(hint + trim_lead, len(image), len(old)):
                if searched[at : at + len(wanted)] == wanted:
                    return _Placement(at, trim_lead, trim_tail, loose)
    return None


def apply_file(
    base: str | None, patched_file: PatchedFile, max_fuzz: int = 0
) -> tuple[str | None, list[str]]:
    """The file `patched_file` makes of `base`, and what had to be tolerated to place its hunks.

    Args:
        base: The file's text before the patch (None when the patch creates it).
        patched_file: One file of a parsed patch (unidiff).
        max_fuzz: Most context lines a hunk may leave unmatched at each end.

    Returns:
        (text after the patch, or None when the patch deletes the file; one sentence per tolerance, e.g.
        "hunk 2: old lines matched the file only up to whitespace").

    Raises:
        PatchError: A hunk's old lines are nowhere in the file, even with the tolerances allowed.
    """
    if patched_file.is_removed_file:
        return None, []
    image = split_lines(base or "")
    tolerated: list[str] = []
    for number, hunk in enumerate(patched_file, start=1):
        lines = _hunk_lines(hunk)
        # The header's new position is where the hunk belongs in the image the earlier hunks left.
        hint = hunk.target_start - 1 if hunk.target_length else hunk.target_start
        placement = _place(image, lines, max(hint, 0), max_fuzz)
        if placement is None:
            raise PatchError(f"hunk {number} of {patched_file.path}: its old lines are not in the file")
        kept = lines[placement.trim_lead : len(lines) - placement.trim_tail]
        old = [line.text for line in kept if line.kind != "+"]
        window = image[placement.at : placement.at + len(old)]
        replacement: list[str] = []
        cursor = 0
        for line in kept:
            if line.kind == "+":
                replacement.append(line.text)
                continue
            if line.kind == " ":
                replacement.append(window[cursor])  # the file's own line: it matched, maybe only loosely
            cursor += 1
        image[placement.at : placement.at + len(old)] = replacement
        if placement.loose and old != window:
            tolerated.append(f"hunk {number}: old lines matched the file only up to whitespace")
        if placement.trim_lead or placement.trim_tail:
            unmatched = placement.trim_lead + placement.trim_tail
            tolerated.append(f"hunk {number}: {unmatched} context line(s) left unmatched")
    return "".join(image), tolerated


__all__ = ["apply_file", "split_lines"]
