"""The import graph of `grader`, read from the source, and the floors docs/architecture.md lists.

Shared by tests/test_import_floors.py (which fails on a cycle or a climbing import) and bench/import_graph.py
(which prints them). Nothing is imported or executed: every module's AST is walked.

An arrow is one grader module naming another in an import. Each arrow has a kind:

- "module": an import at module level, run when the module is imported;
- "lazy": an import inside a function or method, run when it is called;
- "typing": an import under `if TYPE_CHECKING:`, run by type checkers only. It still says that one module
  knows the other's names, which is what the floors are about, so it counts.

`from grader.pkg import name` is an arrow to `grader.pkg.name` when that is a module, else to `grader.pkg`.
Not arrows: the "module:attribute" strings of a registry (`GRADERS`, `BACKENDS`: a plug-in chosen by name,
resolved by the registry when asked for) and the module names in a package's lazy export table (the
package's `if TYPE_CHECKING:` imports of the same names are arrows).

The floors are the table under the heading "Floors" of docs/architecture.md: one row per floor, bottom to
top, whose second cell names every module of that floor in backquotes (dotted, below `grader`; `grader`
itself for the package's `__init__`). A module may import from its own floor and the floors below.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

KINDS = ("module", "lazy", "typing")


@dataclass(frozen=True)
class Arrow:
    """One grader module importing another (dotted names below `grader`; "" is `grader` itself)."""

    source: str
    target: str
    kind: str
    """"module", "lazy" or "typing" (the module docstring says which is which)."""
    line: int
    """The line of the import in the source module, for messages."""


@dataclass(frozen=True)
class Floor:
    """One row of the doc's floor table."""

    index: int
    name: str
    modules: tuple[str, ...]


def module_name(root: Path, path: Path) -> str:
    """The dotted name of a source file below `grader` ("" for grader/__init__.py)."""
    parts = list(path.relative_to(root / "grader").with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def label(module: str) -> str:
    """A module as people write it: "grader" for the package itself, else its name below `grader`."""
    return module or "grader"


def source_files(root: Path) -> dict[str, Path]:
    """Every module of `root`/grader by dotted name."""
    return {module_name(root, p): p for p in sorted((root / "grader").rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def arrows_of(module: str, path: Path, known: set[str]) -> list[Arrow]:
    """The arrows from one module to other grader modules, each import statement's own.

    Args:
        module: its dotted name below `grader`.
        path: its source file.
        known: every module's dotted name (an imported name resolves to the deepest known module holding it).
    Raises:
        SyntaxError: the file does not parse.
    """
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Arrow] = []

    def resolve(name: str) -> str | None:
        if name != "grader" and not name.startswith("grader."):
            return None
        rest = name[len("grader") :].lstrip(".")
        while rest and rest not in known:
            rest = rest.rpartition(".")[0]
        return rest

    def visit(node: ast.AST, kind: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.body:
                    visit_one(sub, "typing")
                for sub in child.orelse:
                    visit_one(sub, kind)
                continue
            visit_one(child, kind)

    def visit_one(child: ast.AST, kind: str) -> None:
        names: list[str] = []
        if isinstance(child, ast.Import):
            names = [alias.name for alias in child.names]
        elif isinstance(child, ast.ImportFrom):
            base = child.module or ""
            if child.level:
                anchor = package.split(".") if package else []
                anchor = anchor[: len(anchor) - (child.level - 1)] if child.level > 1 else anchor
                base = ".".join(["grader", *anchor, *([base] if base else [])])
            names = [f"{base}.{alias.name}" for alias in child.names]
        for name in names:
            target = resolve(name)
            if target is not None and target != module:
                found.append(Arrow(module, target, kind, getattr(child, "lineno", 0)))
        inner = kind
        if kind == "module" and isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            inner = "lazy"
        visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), "module")
    return found


def import_arrows(root: Path) -> list[Arrow]:
    """Every arrow between the modules of `root`/grader, in file order."""
    files = source_files(root)
    known = set(files)
    return [arrow for module, path in files.items() for arrow in arrows_of(module, path, known)]


def cycles(arrows: list[Arrow]) -> list[list[str]]:
    """The modules that import each other, directly or around a circle: each strongly connected set of more
    than one module (Tarjan), sorted, in a sorted list."""
    graph: dict[str, set[str]] = {}
    for arrow in arrows:
        graph.setdefault(arrow.source, set()).add(arrow.target)
        graph.setdefault(arrow.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        # Iterative over each node's successors would be faster; the graph has ~120 nodes.
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


def read_floors(doc: Path) -> list[Floor]:
    """The floor table of the doc: the first table after the heading "## Floors", bottom floor first.

    Args:
        doc: docs/architecture.md.
    Returns:
        one `Floor` per row, numbered from 0 in the table's order; a row's modules are the backquoted names
        of its second cell.
    Raises:
        ValueError: the doc has no "## Floors" heading, no table under it, or a row without modules
            (the message names the doc and the row).
    """
    text = doc.read_text()
    heading = re.search(r"^## Floors\s*$", text, flags=re.M)
    if heading is None:
        raise ValueError(f"{doc}: no '## Floors' heading")
    section = text[heading.end() :]
    section = section[: m.start()] if (m := re.search(r"^## ", section, flags=re.M)) else section
    rows = [line for line in section.splitlines() if line.startswith("|")]
    if len(rows) < 3:
        raise ValueError(f"{doc}: no floor table under '## Floors'")
    floors = []
    for row in rows[2:]:  # past the header and its rule
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        modules = tuple(re.findall(r"`([^`]+)`", cells[1])) if len(cells) > 1 else ()
        if not modules:
            raise ValueError(f"{doc}: the floor row {row!r} names no module")
        floors.append(Floor(len(floors), cells[0], modules))
    return floors


def floor_of(floors: list[Floor]) -> dict[str, int]:
    """Each module the table names and the index of its floor ("grader" in the doc is "" here)."""
    return {("" if m == "grader" else m): f.index for f in floors for m in f.modules}


def misplaced(floors: list[Floor], modules: set[str]) -> list[str]:
    """What is wrong with the table against the source, one line each: a module on no floor, a name that is
    no module, a module on two floors. Empty when the table and the source agree."""
    problems = []
    seen: dict[str, str] = {}
    for floor in floors:
        for name in floor.modules:
            module = "" if name == "grader" else name
            if module in seen:
                problems.append(f"{name} is on two floors: {seen[module]} and {floor.name}")
            seen[module] = floor.name
            if module not in modules:
                problems.append(f"{name} (floor {floor.name}) is no module of grader/")
    problems += [f"{label(m)} is on no floor" for m in sorted(modules - set(seen))]
    return problems


def climbing(arrows: list[Arrow], floors: list[Floor]) -> list[Arrow]:
    """The arrows from a floor to a higher one (modules on no floor are left to `misplaced`)."""
    where = floor_of(floors)
    return [
        a for a in arrows if a.source in where and a.target in where and where[a.target] > where[a.source]
    ]
