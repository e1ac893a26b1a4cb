"""Public Python signatures of a module, and which of them a change breaks: a signal read without a model.

A fix that passes the tests can still break callers the tests never run: code outside the repository that
imports a public function. So a public function or method that is removed, or whose parameters change in a
way an existing call would notice, is a cost of the candidate, whatever the tests say. The check is on the
source text (`ast`), never by running it. Public means: a module-level function, or a method (or
`__init__`) of a module-level class, whose name does not start with an underscore, in a module whose path
has no part starting with an underscore (`__init__.py` excepted).

What counts as breaking, for a call that worked before:
- the name is no longer bound in the module or class (removed, not re-imported or re-assigned);
- a positional parameter is gone, renamed, moved, or became positional-only or keyword-only;
- `*args` or `**kwargs` is gone;
- a keyword-only parameter is gone;
- a parameter lost its default, or a new parameter without a default appeared.
Adding a parameter with a default, adding `*args`/`**kwargs`, or changing a body never breaks a caller.
Names defined more than once in a module (conditional definitions) are left out: which one wins is not
readable from the text.
"""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass
from pathlib import PurePosixPath


@dataclass(frozen=True)
class Param:
    """One parameter: its name, kind and whether it has a default."""

    name: str
    kind: str  # "positional_only", "positional", "var_positional", "keyword_only", "var_keyword"
    default: bool


Signature = tuple[Param, ...]


def is_public_module(path: str) -> bool:
    """A module path with no private part (`_x`), `__init__.py` excepted.

    Args:
        path: a repository path.

    Returns:
        Whether its public functions are a public API.
    """
    parts = PurePosixPath(path).parts
    return path.endswith(".py") and not any(p.startswith("_") and p != "__init__.py" for p in parts)


# CPython keeps the AST constructor's recursion depth in per-interpreter state, so two threads building trees
# at once can fail one with "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905;
# seen on 3.11.7 grading a real benchmark): the heuristic grades groups on worker threads.
_PARSE_LOCK = threading.Lock()


def _parse(source: str) -> ast.Module | None:
    """The module's tree, or None for text `ast` cannot take: bad syntax, a NUL byte, or nesting deeper than
    the parser's stack (MemoryError) or the tree's constructor (RecursionError) allow."""
    with _PARSE_LOCK:
        try:
            return ast.parse(source)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return None


def public_signatures(source: str) -> tuple[dict[str, Signature], set[str]] | None:
    """The public functions and methods of a module, and every name the module (or a class) binds.

    Args:
        source: the module's text.

    Returns:
        ({"f": sig, "Class.method": sig}, {"f", "Class", "Class.method", ...}), or None when the text does not
        parse (no judgement is made on it).
    """
    tree = _parse(source)
    if tree is None:
        return None
    signatures: dict[str, Signature] = {}
    bound: set[str] = set()
    seen: dict[str, int] = {}
    for name, node in _definitions(tree.body, ""):
        seen[name] = seen.get(name, 0) + 1
        bound.add(name)
        if node is not None:
            signatures[name] = _signature(node.args)
    for name, count in seen.items():
        if count > 1:
            signatures.pop(name, None)
    # Anything bound anywhere (under `if`, `try`, even in a function) keeps a module-level name from counting
    # as removed: a false "removed" would cost a candidate for nothing, a missed one only loses a signal.
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
    return signatures, bound


def broken_signatures(before: str, after: str | None) -> list[str]:
    """The public functions of a module that a change breaks, each with how.

    Args:
        before: the module's text before the change.
        after: its text after, or None when the change deletes the module.

    Returns:
        "name: how" per broken function, sorted; empty when nothing breaks or either text does not parse.
    """
    old = public_signatures(before)
    if old is None:
        return []
    if after is None:
        return sorted(f"{name}: module deleted" for name in old[0])
    new = public_signatures(after)
    if new is None:
        return []
    old_signatures, (new_signatures, new_bound) = old[0], new
    broken = []
    for name, signature in old_signatures.items():
        if name not in new_bound:
            broken.append(f"{name}: removed")
        elif name in new_signatures:
            how = incompatibility(signature, new_signatures[name])
            if how:
                broken.append(f"{name}: {how}")
    return sorted(broken)


def incompatibility(old: Signature, new: Signature) -> str:
    """How a call that worked with `old` can fail with `new`; "" when every such call still works.

    Args:
        old: the signature before.
        new: the signature after.

    Returns:
        The first incompatibility found, in words, or "".
    """
    positional = ("positional_only", "positional")
    old_pos = [p for p in old if p.kind in positional]
    new_pos = [p for p in new if p.kind in positional]
    new_by_name = {p.name: p for p in new}
    old_kinds = {p.kind for p in old}
    new_kinds = {p.kind for p in new}
    for i, p in enumerate(old_pos):
        if i >= len(new_pos):
            if "var_positional" in new_kinds:
                continue  # the argument now lands in *args: calls still bind
            return f"parameter {p.name} removed"
        q = new_pos[i]
        if p.kind == "positional" and q.name != p.name:
            return f"parameter {p.name} renamed or moved"
        if p.kind == "positional" and q.kind == "positional_only":
            return f"parameter {p.name} became positional-only"
        if p.default and not q.default:
            return f"parameter {p.name} lost its default"
    for q in new_pos[len(old_pos) :]:
        if not q.default:
            return f"new required parameter {q.name}"
    for kind, shown in (("var_positional", "*args"), ("var_keyword", "**kwargs")):
        if kind in old_kinds and kind not in new_kinds:
            return f"{shown} removed"
    for p in old:
        if p.kind != "keyword_only":
            continue
        q = new_by_name.get(p.name)
        if q is None or q.kind not in ("keyword_only", "positional"):
            return f"keyword parameter {p.name} removed"
        if p.default and not q.default:
            return f"parameter {p.name} lost its default"
    old_names = {p.name for p in old}
    for q in new:
        if q.kind == "keyword_only" and not q.default and q.name not in old_names:
            return f"new required keyword parameter {q.name}"
    return ""


def _definitions(body: list[ast.stmt], prefix: str):  # type: ignore[no-untyped-def]
    """(qualified name, function node or None for a plain binding) for what a module or class body binds."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            public = not node.name.startswith("_") or (prefix and node.name == "__init__")
            yield prefix + node.name, node if public else None
        elif isinstance(node, ast.ClassDef):
            yield prefix + node.name, None
            if not prefix and not node.name.startswith("_"):
                yield from _definitions(node.body, node.name + ".")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                yield prefix + (alias.asname or alias.name).split(".")[0], None
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        yield prefix + name.id, None


def _signature(args: ast.arguments) -> Signature:
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    params = [
        Param(a.arg, "positional_only" if i < len(args.posonlyargs) else "positional", i >= first_default)
        for i, a in enumerate(positional)
    ]
    if args.vararg:
        params.append(Param(args.vararg.arg, "var_positional", False))
    params.extend(
        Param(a.arg, "keyword_only", default is not None)
        for a, default in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    )
    if args.kwarg:
        params.append(Param(args.kwarg.arg, "var_keyword", False))
    return tuple(params)
