"""Command-line options generated from config dataclasses, so every command that grades takes the same ones.

A config field becomes `--field-name` (or the name in `field(metadata={"cli": ...})`; `"cli": None` keeps
it off the command line; `"cli_deprecated": "--old-name"` keeps an old spelling working, with a warning),
its type gives the argument's type or choices, and the docstring under the field is its `--help`, with the
default appended unless the docstring already states it. `add_grading_arguments` adds, to any subcommand,
the grader choice, every registered grader's options (in a help group of their own), the redistribution
options of `GradingOptions` and the resources of `Concurrency`; `grading_from_args` reads them back.
`gagar grade` and `gagar eval` both use it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import re
import textwrap
import types
import typing
import warnings
from collections.abc import Collection
from dataclasses import MISSING, Field, dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal, Union

from grader.graders.base import GRADERS
from grader.pipeline import GradingOptions
from grader.util.concurrency import Concurrency
from grader.util.registry import is_required

NONE_CHOICE = "none"  # an optional choice (`Literal[...] | None`) takes "none" on the command line


class _DeprecatedFlag(argparse.Action):
    """An old spelling of an option: stores into the new option's dest and warns (FutureWarning: shown to
    users by default) naming the new spelling."""

    def __init__(self, option_strings: list[str], dest: str, replacement: str, **kwargs: Any) -> None:
        self.replacement = replacement
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        warnings.warn(f"{option} is deprecated: use {self.replacement}", FutureWarning, stacklevel=2)
        setattr(namespace, self.dest, values)


@cache
def command_group(subparsers: Any, name: str, help: str) -> Any:
    """Add `gagar NAME` as a command made of subcommands (`gagar NAME ACTION ...`); returns the object to
    add the actions to. The action chosen is `args.<name>_command`."""
    return subparsers.add_parser(name, help=help).add_subparsers(dest=f"{name}_command", required=True)


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass, read from its source (empty where there is none)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, following in zip(body, body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = " ".join(following.value.value.split())
    return docs


def user_text(doc: str) -> str:
    """A field's docstring as help for a user: code quotes (`x`, ``x``) dropped, since a terminal shows them
    as they are. The words are the docstring's own to keep user-facing (tests/cli/test_cli_help.py)."""
    return re.sub(r"``?([^`]+)``?", r"\1", doc)


@dataclass(frozen=True)
class _Option:
    field: Field[Any]
    flag: str
    kind: Any  # the field's type with Optional removed
    optional: bool
    doc: str


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], len(args) < len(typing.get_args(annotation))
    return annotation, False


def _cli_fields(cls: type, only: Collection[str] | None = None) -> list[tuple[Field[Any], Any, bool]]:
    """(field, its type without Optional, whether None is allowed) for each field on the command line (of
    those named in `only`, when given)."""
    hints = typing.get_type_hints(cls)
    found = []
    for f in dataclasses.fields(cls):
        if ("cli" in f.metadata and f.metadata["cli"] is None) or (only is not None and f.name not in only):
            continue
        kind, optional = _strip_optional(hints[f.name])
        found.append((f, kind, optional))
    return found


def _options(cls: type, only: Collection[str] | None = None) -> list[_Option]:
    """Every option of `cls`, nested dataclasses flattened. One namespace for all configs: field names are
    their dests, so two configs must not share a field name (argparse refuses the second flag)."""
    docs = field_docs(cls)
    found = []
    for f, kind, optional in _cli_fields(cls, only):
        if dataclasses.is_dataclass(kind):
            found += _options(kind)  # type: ignore[arg-type]
            continue
        flag = f.metadata.get("cli") or "--" + f.name.replace("_", "-")
        found.append(_Option(f, flag, kind, optional, docs.get(f.name, "")))
    return found


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def add_config_arguments(
    group: argparse._ActionsContainer, cls: type, only: Collection[str] | None = None
) -> None:
    """Add one option per field of the dataclass `cls` (nested dataclasses flattened), or per field named in
    `only`. Raises `argparse.ArgumentError` when a flag is already taken."""
    for option in _options(cls, only):
        f, kind, dest = option.field, option.kind, option.field.name
        default = _default(f)
        help_text = user_text(option.doc)
        if default not in (None, False, "") and "(default:" not in help_text:
            off = "--no-" + option.flag.removeprefix("--")
            shown = f"on; {off} turns it off" if default is True else default
            help_text += f" (default: {shown})"
        if kind is bool:  # a default of True can be turned off: --stream / --no-stream
            action = argparse.BooleanOptionalAction if default is True else "store_true"
            group.add_argument(option.flag, dest=dest, action=action, default=bool(default), help=help_text)
            continue
        choices: list[str] | None = None
        if "choices" in f.metadata:  # a collection, or a callable (a registry's names, read now)
            given = f.metadata["choices"]
            choices = sorted(given() if callable(given) else given)
        elif typing.get_origin(kind) is Literal:
            choices = [str(value) for value in typing.get_args(kind)]
        if choices is not None:
            if option.optional:
                choices.append(NONE_CHOICE)
            shown = NONE_CHOICE if default is None and option.optional else default
            group.add_argument(option.flag, dest=dest, choices=choices, default=shown, help=help_text)
            continue
        convert = kind if kind in (int, float, str, Path) else str
        group.add_argument(option.flag, dest=dest, type=convert, default=default, help=help_text)
        old = f.metadata.get("cli_deprecated")
        if old:
            group.add_argument(
                old,
                dest=dest,
                type=convert,
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
                action=_DeprecatedFlag,
                replacement=option.flag,
            )


def config_from_args(
    cls: type, args: argparse.Namespace, only: Collection[str] | None = None
) -> dict[str, Any]:
    """The keyword options for `cls` (or its fields named in `only`) as given on the command line; required
    fields are left out when unset, so the registry's own error names them."""
    values: dict[str, Any] = {}
    for f, kind, optional in _cli_fields(cls, only):
        if dataclasses.is_dataclass(kind):
            values[f.name] = kind(**config_from_args(kind, args))  # type: ignore[operator]
            continue
        value = getattr(args, f.name)
        has_choices = typing.get_origin(kind) is Literal or "choices" in f.metadata
        if optional and value == NONE_CHOICE and has_choices:
            value = None
        if value is None and is_required(f):
            continue
        values[f.name] = value
    return values


def add_grading_arguments(parser: argparse.ArgumentParser) -> None:
    """The grader, its options, redistribution and resources: what every command that grades accepts."""
    parser.add_argument(
        "--grader",
        default="heuristic",
        choices=GRADERS.names(),
        help="; ".join(f"{e.name}: {e.doc.split('.')[0]}" for e in GRADERS.entries()),
    )
    parser.add_argument("--workers", type=int, default=4, help="groups graded at once (default: 4)")
    parser.add_argument(
        "--pass-threshold", type=float, default=1.0, help="reward at which a trajectory passes"
    )
    parser.add_argument(
        "--cache", type=Path, help="grade cache folder: groups graded before are not graded again"
    )
    add_config_arguments(parser.add_argument_group("grading and redistribution"), GradingOptions)
    add_config_arguments(parser.add_argument_group("resources (per process)"), Concurrency)
    for entry in GRADERS.entries():
        if entry.config is not None and dataclasses.fields(entry.config):
            title = f"{entry.name} grader (only with --grader {entry.name})"
            add_config_arguments(parser.add_argument_group(title), entry.config)


@dataclass
class GradingArguments:
    """What `add_grading_arguments` options say, ready to use (the resources are `options.concurrency`)."""

    grader: str
    grader_options: dict[str, Any]
    options: GradingOptions


def grading_from_args(args: argparse.Namespace, transcript_dir: Path | None = None) -> GradingArguments:
    """Read the options back; `transcript_dir` is given to a grader that writes transcripts."""
    resources = Concurrency(**config_from_args(Concurrency, args))
    options = GradingOptions(**config_from_args(GradingOptions, args), concurrency=resources)
    entry = GRADERS.get(args.grader)
    grader_options = config_from_args(entry.config, args) if entry.config is not None else {}
    names = {f.name for f in dataclasses.fields(entry.config)} if entry.config is not None else set()
    takes_transcripts = "transcript_dir" in names
    if transcript_dir is not None and takes_transcripts:
        grader_options["transcript_dir"] = transcript_dir
    return GradingArguments(args.grader, grader_options, options)
