"""`gagar bench bundle`: --repository is OWNER/NAME and --out a bundle file, each refused otherwise with the
value named, before anything is written (issue 37.3: its help example gave a URL and a folder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.evaluation import cli
from tests.conftest import RepoFactory


def test_a_url_or_a_folder_is_refused_and_the_bundle_is_written_when_both_are_right(
    repo: RepoFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["bench", "bundle", str(repo.path), repo.base, "--repository"]
    assert cli.main([*argv, "https://github.com/acme/widget", "--out", "bundles/w.bundle"]) == 2
    assert "--repository: 'https://github.com/acme/widget' is refused: expected OWNER/NAME" in (
        capsys.readouterr().err
    )
    assert cli.main([*argv, "acme/widget", "--out", "bundles/"]) == 2
    assert "--out bundles/: a folder; give the bundle file to write" in capsys.readouterr().err
    assert not (tmp_path / "bundles").exists()
    assert cli.main([*argv, "acme/widget", "--out", "bundles/w.bundle"]) == 0
    record = json.loads(capsys.readouterr().out)["bundles/w.bundle"]
    assert record["repository"] == "acme/widget" and record["commit"] == repo.base
    assert (tmp_path / "bundles" / "w.bundle").stat().st_size > 0
