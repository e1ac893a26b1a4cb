"""The code base stays ruff clean (lint and format), as the developers' guide asks."""

from __future__ import annotations

import ast
import shutil
import subprocess

import pytest

from tests.conftest import REPO_ROOT

RUFF = shutil.which("ruff")
# The project's own folders only: a virtual environment a user makes inside the clone is not ours to lint.
SOURCES = ["grader", "tests", "bench", "examples", "prompts"]


@pytest.mark.skipif(RUFF is None, reason="ruff is not installed (pip install -e '.[dev]')")
@pytest.mark.parametrize(
    "command", [["check", *SOURCES], ["format", "--check", *SOURCES]], ids=["check", "format"]
)
def test_ruff(command: list[str]) -> None:
    proc = subprocess.run([RUFF, *command], cwd=REPO_ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def _raised_directly(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names of the exception classes `function` raises in its own body (not in nested functions)."""
    names: set[str] = set()
    pending: list[ast.AST] = list(function.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name):
                names.add(exc.id)
            elif isinstance(exc, ast.Attribute):
                names.add(exc.attr)
        pending.extend(ast.iter_child_nodes(node))
    return names - {"NotImplementedError"}


def _public_functions(tree: ast.Module):  # type: ignore[no-untyped-def]
    """(name, function, docstring it may document in) for public functions and methods of public classes;
    a constructor may document in its class's docstring."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            yield node.name, node, ast.get_docstring(node) or ""
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for item in node.body:
                if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if item.name == "__init__":
                    doc = (ast.get_docstring(item) or "") + (ast.get_docstring(node) or "")
                elif item.name.startswith("_"):
                    continue
                else:
                    doc = ast.get_docstring(item) or ""
                yield f"{node.name}.{item.name}", item, doc


def test_public_functions_document_what_they_raise() -> None:
    # The guide's rule (inspect_ai's manner): a caller reads what can go wrong in the docstring. Checked
    # for what a function raises itself; what it lets through from a callee is the callee's to document.
    undocumented = []
    for path in sorted((REPO_ROOT / "grader").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for name, function, doc in _public_functions(tree):
            missing = sorted(n for n in _raised_directly(function) if n not in doc)
            if missing:
                where = f"{path.relative_to(REPO_ROOT)}:{function.lineno} {name}"
                undocumented.append(f"{where} raises {', '.join(missing)}")
    assert undocumented == [], "\n".join(undocumented)
