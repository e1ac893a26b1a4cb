"""Requirement lines an offline layer build cannot honour are left out and listed; the rest is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.sandbox.requirements import honour, unhonourable


@pytest.mark.parametrize(
    "line",
    [
        "git+https://github.com/sphinx-doc/sphinx.git@abc123#egg=sphinx",
        "-e git+https://github.com/a/b.git#egg=b",
        "sphinx @ git+https://github.com/sphinx-doc/sphinx",
        "hg+https://example.org/repo",
        "pkg @ https://example.com/pkg-1.0.tar.gz",
        "https://github.com/a/b/archive/main.zip",
        "--extra-index-url https://example.com/simple",
        "-i https://example.com/simple",
        "--find-links https://example.com/wheels",
    ],
)
def test_lines_needing_more_than_pypi_are_unhonourable(line: str) -> None:
    assert unhonourable(line)


@pytest.mark.parametrize(
    "line",
    [
        "pytest>=6",
        "numpy==1.21.0  # pinned for the tests",
        "# git+https://github.com/a/b.git in a comment",
        "-r docs.txt",
        "pkg @ https://files.pythonhosted.org/packages/pkg-1.0-py3-none-any.whl",
        "",
        "requests[socks]>=2; python_version >= '3.8'",
    ],
)
def test_pypi_lines_are_honoured(line: str) -> None:
    assert not unhonourable(line)


def test_a_file_and_its_includes_are_rewritten_without_the_unhonourable_lines(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "requirements").mkdir(parents=True)
    dev = tree / "requirements" / "dev.txt"
    dev.write_text("-r docs.txt\n--requirement=tests.txt\npytest==7.4.4\n")
    (tree / "requirements" / "docs.txt").write_text(
        "git+https://github.com/sphinx-doc/sphinx.git@abc#egg=sphinx\nsix==1.16.0\n"
    )
    (tree / "requirements" / "tests.txt").write_text("-r dev.txt\n--extra-index-url https://example.com/s\n")
    (tmp_path / "outside.txt").write_text("git+https://example.com/x.git\n")
    (tree / "requirements" / "escape.txt").write_text("")
    with dev.open("a") as handle:
        handle.write("-r ../../outside.txt\n")
    left_out = honour(dev, tree)
    assert left_out == [
        "requirements/docs.txt:1: git+https://github.com/sphinx-doc/sphinx.git@abc#egg=sphinx",
        "requirements/tests.txt:2: --extra-index-url https://example.com/s",
    ]
    docs = (tree / "requirements" / "docs.txt").read_text().splitlines()
    assert docs[1] == "six==1.16.0" and docs[0].startswith("# left out by gagar")
    assert "pytest==7.4.4" in dev.read_text()
    assert (tmp_path / "outside.txt").read_text() == "git+https://example.com/x.git\n"  # outside the tree


def test_a_local_editable_install_is_made_plain_and_the_rest_kept(tmp_path: Path) -> None:
    # pylint 2.15's requirements_test.txt ends in "-e .": its setuptools has no PEP 660 hook, so pip failed
    # the whole layer on that line ("missing the 'build_editable' hook").
    tree = tmp_path / "tree"
    tree.mkdir()
    requirements = tree / "requirements_test.txt"
    requirements.write_text("pytest~=7.1\n-e .\n--editable=./sub[test]  # extras\n-e git+https://x.org/y.git\n")
    left_out = honour(requirements, tree)
    assert left_out == ["requirements_test.txt:4: -e git+https://x.org/y.git"]
    kept = [line for line in requirements.read_text().splitlines() if not line.startswith("#")]
    assert kept == ["pytest~=7.1", ".", "./sub[test]"]
