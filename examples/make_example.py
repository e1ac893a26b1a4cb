"""Regenerate the bundled example: a small repository (as a git bundle) and one group of trajectories.

    python examples/make_example.py

Writes `examples/inventory.bundle` and `examples/inventory_group.json`. Commits use a fixed identity and date,
so the bundle's base commit is the same on every machine.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from grader.workspace.gitcmd import git_identity, safe_env

HERE = Path(__file__).resolve().parent

BASE_FILES = {
    "README.md": "# inventory\n\nA tiny stock-keeping library.\n",
    "pyproject.toml": '[project]\nname = "inventory"\nversion = "0.1.0"\n',
    "inventory/__init__.py": '"""A tiny stock-keeping library."""\n\n'
    "from inventory.stock import Item, average_price, total_value\n\n"
    '__all__ = ["Item", "average_price", "total_value"]\n',
    "inventory/stock.py": '''"""Items in stock and what they are worth."""

from dataclasses import dataclass


@dataclass
class Item:
    name: str
    price: float
    quantity: int


def total_value(items: list[Item]) -> float:
    """Sum of price times quantity over all items."""
    return sum(item.price * item.quantity for item in items)


def average_price(items: list[Item]) -> float:
    """Mean unit price of the items; 0.0 when there are none."""
    return sum(item.price for item in items) / len(items)
''',
    "inventory/report.py": '''"""Plain-text stock reports."""

from inventory.stock import Item, total_value


def render(items: list[Item]) -> str:
    lines = [f"{item.name:<20} {item.quantity:>5} x {item.price:>8.2f}" for item in items]
    lines.append(f"{'total':<20} {total_value(items):>18.2f}")
    return "\\n".join(lines)
''',
    "tests/test_stock.py": """from inventory.stock import Item, average_price, total_value


def test_total_value():
    items = [Item("bolt", 0.5, 10), Item("nut", 0.25, 4)]
    assert total_value(items) == 6.0


def test_average_price():
    items = [Item("bolt", 0.5, 10), Item("nut", 0.25, 4)]
    assert average_price(items) == 0.375


def test_average_price_empty():
    assert average_price([]) == 0.0
""",
}

STATEMENT = (
    "average_price([]) raises ZeroDivisionError, but its docstring promises 0.0 when there are no items. "
    "Make average_price return 0.0 for an empty list."
)

STOCK = BASE_FILES["inventory/stock.py"]
GUARDED = STOCK.replace(
    "    return sum(item.price for item in items) / len(items)",
    "    if not items:\n        return 0.0\n    return sum(item.price for item in items) / len(items)",
)

# Each trajectory is the files it leaves changed; the patch is what `git diff` makes of them.
FIX = {"inventory/stock.py": GUARDED}
FIX_OTHER_SPACING = {"inventory/stock.py": GUARDED.replace("    if not items:", "    if  not items: ")}
LEFTOVER = {
    "reproduce.py": "from inventory.stock import average_price\n\n# check the fix by hand\n"
    "print(average_price([]))\nprint('ok')\n"
}
TEST_EDIT = {
    "tests/test_stock.py": BASE_FILES["tests/test_stock.py"].replace(
        "assert average_price([]) == 0.0", "assert average_price([]) in (0, 0.0, None)"
    )
}
REFORMAT = {
    "inventory/report.py": BASE_FILES["inventory/report.py"]
    .replace("import Item, total_value", "import (\n    Item,\n    total_value,\n)")
    .replace("-> str:", "-> str :")
    .replace(" for item in items]", "\n             for item in items]")
}
WRONG_FIX = {"inventory/stock.py": GUARDED.replace("return 0.0", "return None")}

TRAJECTORIES = [
    ("clean", FIX, True, "The guard, nothing else."),
    ("clean-respaced", FIX_OTHER_SPACING, True, "The same guard written with other spacing."),
    ("leftover-script", {**FIX, **LEFTOVER}, True, "The guard plus the reproduction script it used."),
    ("edits-tests", {**FIX, **TEST_EDIT}, True, "The guard, and a test loosened to accept None."),
    ("reformats-report", {**FIX, **REFORMAT}, True, "The guard, and an unrelated file reformatted."),
    ("wrong-value", WRONG_FIX, False, "Returns None instead of 0.0."),
    ("gave-up", {}, False, "No patch."),
]


def git(*args: str, cwd: Path) -> str:
    env = safe_env(git_identity("example", "example@localhost", date="2024-01-01T00:00:00+0000"))
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def diff(repo: Path, files: dict[str, str]) -> str:
    """The patch that leaves `files` changed, made by git and undone afterwards."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git("add", "-A", cwd=repo)
    patch = git("diff", "--cached", cwd=repo)
    git("reset", "--quiet", "--hard", cwd=repo)
    return patch


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "inventory"
        repo.mkdir()
        git("init", "--quiet", "--initial-branch=main", cwd=repo)
        for name, text in BASE_FILES.items():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text(text)
        git("add", "-A", cwd=repo)
        git("commit", "--quiet", "-m", "inventory: stock items and reports", cwd=repo)
        base = git("rev-parse", "HEAD", cwd=repo).strip()
        patches = {name: diff(repo, files) for name, files, _, _ in TRAJECTORIES}
        bundle = HERE / "inventory.bundle"
        git("bundle", "create", "--quiet", str(bundle), "main", cwd=repo)
    group = {
        "group_id": "inventory-average-empty",
        "task": {
            "repo": "inventory.bundle",
            "base_commit": base,
            "statement": STATEMENT,
            "setup": "pip install --no-deps --no-build-isolation -e . >/dev/null 2>&1 || true",
            "test_command": "python -m pytest -q tests",
        },
        "trajectories": [
            {"id": name, "patch": patches[name], "passed": passed, "metadata": {"note": note}}
            for name, _, passed, note in TRAJECTORIES
        ],
    }
    (HERE / "inventory_group.json").write_text(json.dumps(group, indent=2) + "\n")
    print(f"base commit {base}; wrote {bundle.name} and inventory_group.json")


if __name__ == "__main__":
    main()
