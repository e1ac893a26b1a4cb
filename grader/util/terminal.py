"""Untrusted text made safe to print on a terminal.

Ids, patches, reasons and transcripts come from trajectories and models: printed raw, an ESC starts a
terminal escape sequence (colours, cursor moves, window titles) and a bidi control (U+202E right-to-left
override, U+2066 isolates...) reorders what the reader sees, so an id can look like another. `printable`
spells both out.
"""

from __future__ import annotations

import re

# C0 controls except tab and newline, DEL, C1 controls; the bidi embedding, override, isolate and mark
# characters; and the line and paragraph separators some terminals treat as line breaks.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def _spelled(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with control and bidi characters spelled out (`\\x1b`, `\\u202e`), newlines and tabs kept.

    Args:
        text: any text.

    Returns:
        The text to print; equal to `text` when it holds nothing unsafe.
    """
    return _UNSAFE.sub(_spelled, text)


def printable_line(text: str) -> str:
    """`printable`, with newlines and tabs spelled out too (`\\n`, `\\t`): for one-line fields (ids, paths).

    Args:
        text: any text.

    Returns:
        One line to print; equal to `text` when it holds nothing unsafe and no newline or tab.
    """
    return printable(text).replace("\n", "\\n").replace("\t", "\\t")
