"""JSON read from files gagar did not write, where every way to fail is a ValueError.

Python's JSON reader recurses once per nesting level, so a file of 100,000 open brackets (a hand edit, a
hostile input) raises RecursionError, which no `except ValueError` around `json.loads` catches. Every
reader of such files goes through `loads`, so nesting is refused like any other text that is not JSON.

Python's reader also keeps the last of a key given twice in one object, silently; readers for which a repeated
key is a mistake (a group file, a recipe) pass `object_pairs_hook=unique_keys`, which refuses it, named.
"""

from __future__ import annotations

import json
from typing import Any

from grader.errors import GagarError


class TooDeep(GagarError, ValueError):
    """The text nests deeper than Python's JSON reader goes."""


class DuplicateKey(GagarError, ValueError):
    """A JSON object gives one key twice; the message names the key."""


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An `object_pairs_hook` for `loads`: the object as a dict, refusing a key given twice.

    Args:
        pairs: the object's (key, value) pairs in order, as the JSON reader hands them.

    Returns:
        The dict.

    Raises:
        DuplicateKey: naming the first key given twice.
    """
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise DuplicateKey(f"key {key!r} appears twice in one object")
        found[key] = value
    return found


def loads(text: str | bytes, **options: Any) -> Any:
    """The JSON value of `text`, as `json.loads(text, **options)` gives it.

    Args:
        text: JSON text; bytes are decoded as UTF-8.
        options: passed to `json.loads` (e.g. `object_pairs_hook`).

    Returns:
        The decoded value.

    Raises:
        json.JSONDecodeError: the text is not JSON.
        UnicodeDecodeError: bytes that are not UTF-8.
        TooDeep: the text nests deeper than the reader goes (Python's recursion limit).
        Each is a ValueError. What an `object_pairs_hook` raises passes through.
    """
    try:
        return json.loads(text, **options)
    except RecursionError:
        raise TooDeep("nested deeper than the JSON reader goes") from None
