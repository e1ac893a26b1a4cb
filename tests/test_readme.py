"""The README and the docs pages: their Python examples run as written, the quick start prints what the README
shows, every relative link leads to a file and heading that exist, and docs/index.md lists every page."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXAMPLE_GROUP, REPO_ROOT

DOCS = REPO_ROOT / "docs"
PAGES = [REPO_ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _name(page: Path) -> str:
    return str(page.relative_to(REPO_ROOT))


def _python_blocks(page: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    prose = FENCE.sub("", page.read_text())
    return {_anchor(m) for m in re.findall(r"^#{1,6} +(.+)$", prose, flags=re.M)}


def test_readme_and_docs_hold_python_examples() -> None:
    assert len(_python_blocks(REPO_ROOT / "README.md")) >= 2
    assert sum(len(_python_blocks(page)) for page in PAGES) >= 8


@pytest.mark.parametrize("page", [p for p in PAGES if _python_blocks(p)], ids=_name)
def test_python_blocks_run(page: Path) -> None:
    for block in _python_blocks(page):
        proc = subprocess.run([sys.executable, "-c", block], cwd=REPO_ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, f"{_name(page)}: a python block fails:\n{block}\n{proc.stderr}"


def test_quick_start_prints_what_the_readme_shows(tmp_path: Path) -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    command = "pip install . && gagar grade examples/inventory_group.json --out runs/example"
    assert command in readme
    shown = re.search(r"The first command prints[^\n]*\n\n```\n(.*?)```", readme, flags=re.S)
    assert shown, "the README's quick start output block is missing"
    proc = subprocess.run(
        [sys.executable, "-m", "grader.cli", "grade", str(EXAMPLE_GROUP), "--out", "runs/example"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown.group(1)


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_relative_links_lead_somewhere(page: Path) -> None:
    broken = []
    for target in LINK.findall(FENCE.sub("", page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # a web address: not checked offline
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.name}")
    assert not broken, f"{_name(page)}: {broken}"


def test_docs_index_lists_every_page() -> None:
    linked = {target.partition("#")[0] for target in LINK.findall((DOCS / "index.md").read_text())}
    missing = [page.name for page in DOCS.glob("*.md") if page.name != "index.md" and page.name not in linked]
    assert not missing, f"docs/index.md does not list {missing}"
    assert "docs/index.md" in (REPO_ROOT / "README.md").read_text()
