"""Ids as names on disk and in git: unique, bounded, safe.

Group and trajectory ids come from the caller and may hold anything (slashes, NUL, `..`, control characters,
thousands of characters). `safe_name` maps each to a name that is a valid file name and git ref component,
and maps two different ids to two different names:

- an id that already is a short, plain name (letters, digits, `._-`, at most 80 characters) is kept as it is,
  so the usual ids stay readable (`transcripts/inventory-average-empty.jsonl`);
- any other id becomes a readable prefix (unsafe characters turned into `-`, cut to 60 characters) plus `-`
  and 16 hex digits of the SHA-256 of the whole id.

A kept id never ends in `-` plus 16 hex digits (such an id is hashed too), so a kept id and a hashed one never
meet; two hashed names meet only if SHA-256 prefixes of 64 bits collide.
"""

from __future__ import annotations

import hashlib
import re

MAX_PLAIN = 80
"""The longest id kept as it is."""
PREFIX = 60
"""The longest readable prefix of a hashed name (the whole name is at most PREFIX + 17 characters)."""

_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_HASHED_TAIL = re.compile(r"-[0-9a-f]{16}")


def _is_plain(identifier: str) -> bool:
    return (
        len(identifier) <= MAX_PLAIN
        and _PLAIN.fullmatch(identifier) is not None
        and ".." not in identifier
        and not identifier.endswith((".", ".lock"))
        and _HASHED_TAIL.search(identifier[-17:]) is None
    )


def safe_name(identifier: str) -> str:
    """The name that stands for `identifier` in file names and git refs (see the module's docstring).

    Args:
        identifier: any string (lone surrogates included).

    Returns:
        A non-empty name of at most 80 characters from `[A-Za-z0-9._-]`, starting with a letter, digit or
        `_`, without `..`, not ending in `.` or `.lock`; a different name for every different id.
    """
    if _is_plain(identifier):
        return identifier
    readable = re.sub(r"[^A-Za-z0-9._-]+", "-", identifier)
    readable = re.sub(r"\.{2,}", ".", readable).lstrip(".-")[:PREFIX].rstrip(".-") or "id"
    digest = hashlib.sha256(identifier.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{readable}-{digest}"
