"""A tool call's arguments: decoded (JSON nested past the reader refused as any text that is not JSON) and
checked against the tool's schema, a final submission's `tiers` read as the ranking they stand for, and
whatever a tool raises on them turned into the error the model is shown.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from grader.errors import ToolError
from grader.sandbox.output import cap_text
from grader.util.jsontext import loads


def _check_type(value: Any, schema: dict[str, Any], where: str) -> None:
    kind = schema.get("type")
    checks: dict[str, Callable[[Any], bool]] = {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "array": lambda v: isinstance(v, list),
        "object": lambda v: isinstance(v, dict),
        "boolean": lambda v: isinstance(v, bool),
    }
    if kind in checks and not checks[kind](value):
        raise ToolError(f"{where} must be of type {kind}, got {json.dumps(value)[:80]}")
    if kind == "string" and "\x00" in value:
        # No path, pattern or command can hold one: git and exec refuse it as an argument.
        raise ToolError(f"{where} holds a NUL byte (\\u0000), which no path, pattern or command can hold")
    if kind in ("integer", "number"):
        if "minimum" in schema and value < schema["minimum"]:
            raise ToolError(f"{where} must be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise ToolError(f"{where} must be <= {schema['maximum']}")
    if kind == "array" and "items" in schema:
        for i, item in enumerate(value):
            _check_type(item, schema["items"], f"{where}[{i}]")
    if kind == "object":
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                raise ToolError(f"missing required argument {name!r}")
        for name, item in value.items():
            if name in properties:
                _check_type(item, properties[name], f"{where}.{name}" if where != "arguments" else name)
            elif schema.get("additionalProperties") is False:
                raise ToolError(f"unknown argument {name!r}; allowed: {', '.join(properties) or 'none'}")
            elif isinstance(schema.get("additionalProperties"), dict):
                _check_type(item, schema["additionalProperties"], f"{where}.{name}")


def parse_arguments(raw: str | dict[str, Any] | None, schema: dict[str, Any]) -> dict[str, Any]:
    """Decode and check a tool call's arguments against its JSON schema.

    Raises:
        ToolError: what is wrong: not JSON, nested deeper than the JSON reader goes, not an object, a value
            of the wrong type or out of range, a string holding a NUL byte, a missing or unknown argument.
    """
    if isinstance(raw, dict):
        arguments = raw
    else:
        try:
            arguments = loads(raw or "{}")
        except json.JSONDecodeError as exc:
            raise ToolError(f"arguments are not valid JSON ({exc.msg} at position {exc.pos})") from None
        except ValueError as exc:  # nested deeper than the reader goes
            raise ToolError(f"arguments are not valid JSON here ({exc})") from None
    if not isinstance(arguments, dict):
        raise ToolError("arguments must be a JSON object")
    _check_type(arguments, schema, "arguments")
    return arguments


def tiers_as_ranking(raw: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
    """A submission's `tiers` ({label: tie-group number}) as the `ranking` it stands for (tie groups in order
    of their numbers, labels in the order given); any other submission unchanged. ToolError for numbers
    that are not integers from 1."""
    arguments = raw
    if isinstance(raw, str):
        try:
            arguments = loads(raw or "{}")
        except ValueError:
            return raw  # parse_arguments names the problem
    if (
        not isinstance(arguments, dict)
        or "ranking" in arguments
        or not isinstance(arguments.get("tiers"), dict)
    ):
        return raw
    tiers: dict[str, Any] = arguments["tiers"]
    wrong = [label for label, n in tiers.items() if not isinstance(n, int) or isinstance(n, bool) or n < 1]
    if wrong:
        raise ToolError(f"tiers must map each label to a tie-group number from 1: not {', '.join(wrong)}")
    groups: dict[int, list[str]] = {}
    for label, n in tiers.items():
        groups.setdefault(n, []).append(label)
    rest = {k: v for k, v in arguments.items() if k != "tiers"}
    return {"ranking": [groups[n] for n in sorted(groups)], **rest}


@contextmanager
def tool_errors(name: str) -> Iterator[None]:
    """Turns whatever a tool raises on a call's arguments into the ToolError the model is shown.

    A ToolError passes as it is; any other Exception (git refusing an argument, JSON too deep for a
    writer, a sandbox backend's own error) becomes one naming the tool and the exception, so a call the tool
    layer cannot handle is answered like any bad call rather than ending the grading.

    Args:
        name: the tool, as the message names it.

    Raises:
        ToolError: as described.
    """
    try:
        yield
    except ToolError:
        raise
    except Exception as exc:  # noqa: BLE001 - the point: no call's arguments end the grading
        text = cap_text(str(exc).replace("\x00", "\\u0000"), 300)
        raise ToolError(f"{name} failed on these arguments: {type(exc).__name__}: {text}") from exc
