"""The import graph of `grader`: the arrows that climb a floor, and the cycles.

Reads the AST of every module under grader/ (no import is executed), keeps the imports of other grader
modules, and places each module on a floor of docs/architecture.md ("Floors"). An arrow from a lower
floor to a higher one is *upward*; a cycle is a strongly connected set of modules importing each other
at module level. Imports inside functions are counted too (they are still arrows), marked "lazy", and
`if TYPE_CHECKING:` imports are left out (they cost nothing at run time).

    python bench/import_graph.py [ROOT]        # ROOT defaults to this checkout

Prints the upward arrows (module-level first), the cycles and the counts. Limits: a module missing from
FLOORS is reported and counted as floor -1, so a new module shows up rather than hiding.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

# Bottom to top. A module may import from its own floor or any floor below it.
FLOORS: list[tuple[str, list[str]]] = [
    (
        "foundations",
        [
            "",  # the package: its names load lazily, so importing it imports only `lazy`
            "errors",
            "util",
            "util.lazy",
            "groups.outcomes",
            "util.atomic",
            "util.cachedirs",
            "util.safenames",
            "util.terminal",
            "util.jsontext",
            "util.registry",
            "util.filelock",
            "util.concurrency",
            "workspace.gitcmd",
            "graders.llm.prompts",
            "ranking",
            "ranking.order",
            "ranking.agreement",
            "redistribution",
            "redistribution.redistribute",
            "graders.transcript",
        ],
    ),
    ("input", ["groups", "groups.models", "groups.formats", "ranking.references", "groups.sampling"]),
    # Below both sides it separates: the workspace makes views, the graders read them, a sandbox takes a view
    # as its tree source. The LLM grader's config is a plain dataclass that the grader registry names; its
    # sandbox is a name in the backends' registry (`sandbox.base`, the interface: no backend).
    (
        "boundary",
        [
            "workspace.view",
            "graders",
            "graders.base",
            "graders.llm",
            "graders.llm.config",
            "graders.llm.budgets",
            "sandbox",
            "sandbox.base",
        ],
    ),
    (
        "workspace.workspace",
        [
            "workspace",
            "workspace.patches",
            "workspace.hunks",
            "workspace.exactapply",
            "workspace.gitobjects",
            "workspace.mirrors",
            "workspace.bare",
            "workspace.workspace",
            "workspace.injections",
        ],
    ),
    (
        "sandboxes",
        [
            "sandbox.output",
            "sandbox.docker",
            "sandbox.local",
            "sandbox.lifecycle",
            "sandbox.leftovers",
        ],
    ),
    (
        "environments",
        [
            "sandbox.interpreters",
            "sandbox.images",
            "sandbox.recipes",
            "sandbox.swebench",
            "sandbox.requirements",
            "sandbox.environments",
            "sandbox.prebuild",
        ],
    ),
    (
        "graders",
        [
            "graders.evidence",
            "graders.evidence.snippets",
            "graders.evidence.outcomes",
            "graders.evidence.run",
            "graders.evidence.signals",
            "graders.evidence.opening",
            "graders.heuristic",
            "graders.llm.agent",
            "graders.llm.tools",
            "graders.signatures",
            "graders.llm.endpoint",
            "graders.cache",
        ],
    ),
    ("length monitor", ["ranking.length"]),
    ("pipeline", ["pipeline", "redistribution.simulate"]),
    (
        "integrations",
        [
            "integrations",
            "integrations.rows",
            "integrations.batch",
            "integrations.tensors",
            "integrations.weights",
            "integrations.ray",
            "integrations.cluster",
            "integrations.verl",
            "integrations.verl_plugin",
            "integrations.trl",
            "integrations.slime",
            "integrations.openrlhf",
        ],
    ),
    (
        "evaluation",
        [
            "evaluation",
            "evaluation.metrics",
            "evaluation.harness",
            "evaluation.benchmark",
            "evaluation.recipe",
            "evaluation.prepare",
            "evaluation.probes",
            "evaluation.degrade",
            "evaluation.edits",
            "evaluation.consensus",
        ],
    ),
    ("distillation", ["distill", "distill.run", "distill.sft", "distill.augment", "distill.benchmarks"]),
    (
        "viewers",
        [
            "inspect",
            "inspect.run",
            "inspect.show",
            "inspect.report",
            "inspect.trend",
            "inspect.diff",
            "inspect.steps",
            "inspect.assets",
        ],
    ),
    (
        "test servers",
        ["servers", "servers.scripted", "servers.llamacpp", "servers.llamacpp_python", "servers.serve"],
    ),
    (
        "CLI",
        [
            "cli",
            "cli.__main__",
            "cli.main",
            "cli.options",
            "cli.examples",
            "redistribution.simulate_cli",
            "evaluation.cli",
            "inspect.cli",
            "sandbox.cli",
            "distill.cli",
        ],
    ),
]
FLOOR_OF = {name: index for index, (_, names) in enumerate(FLOORS) for name in names}


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root / "grader").with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(root: Path, path: Path, known: set[str]) -> dict[str, bool]:
    """Grader modules `path` imports, each mapped to whether some import of it is at module level."""
    this = module_name(root, path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found: dict[str, bool] = {}

    def target(name: str) -> str | None:
        # The deepest known module the dotted name falls in ("grader.x.y.Name" -> "x.y").
        if not name.startswith("grader"):
            return None
        rest = name[len("grader") :].lstrip(".")
        while rest and rest not in known:
            rest = rest.rpartition(".")[0]
        return rest

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub, top)
                continue
            inner = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
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
                hit = target(name)
                if hit is not None and hit != this:
                    found[hit] = found.get(hit, False) or top
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), True)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
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

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def main(root: Path) -> None:
    paths = sorted((root / "grader").rglob("*.py"))
    known = {module_name(root, p) for p in paths}
    edges = {module_name(root, p): imports(root, p, known) for p in paths}
    unplaced = sorted(m for m in known if m not in FLOOR_OF)
    floor = lambda m: FLOOR_OF.get(m, -1)  # noqa: E731
    label = lambda m: m or "grader"  # noqa: E731
    floor_name = lambda m: FLOORS[floor(m)][0] if floor(m) >= 0 else "no floor"  # noqa: E731
    upward = [
        (src, dst, top)
        for src, targets in edges.items()
        for dst, top in targets.items()
        if floor(dst) > floor(src)
    ]
    upward.sort(key=lambda e: (not e[2], e[0], e[1]))
    print(f"{len(known)} modules, {sum(len(t) for t in edges.values())} arrows")
    if unplaced:
        print("not on any floor:", ", ".join(unplaced))
    eager = sum(1 for edge in upward if edge[2])
    print(f"upward arrows: {eager} module-level, {len(upward) - eager} lazy")
    for src, dst, top in upward:
        kind = "module" if top else "lazy  "
        print(f"  {kind} {label(src)} ({floor_name(src)}) -> {label(dst)} ({floor_name(dst)})")
    graph = {src: {dst for dst, top in targets.items() if top} for src, targets in edges.items()}
    found = cycles(graph)
    print(f"cycles (module-level): {len(found)}")
    for component in found:
        print("  " + " <-> ".join(label(m) for m in component))
    found = cycles({src: set(targets) for src, targets in edges.items()})
    print(f"cycles (counting lazy imports): {len(found)}")
    for component in found:
        print("  " + " <-> ".join(label(m) for m in component))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
