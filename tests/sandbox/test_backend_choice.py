"""The LLM grader's `sandbox` is any backend in the registry, checked when the grader is made."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grader.cli.commands import build_parser
from grader.cli.options import config_from_args
from grader.errors import UnknownName
from grader.graders.llm.config import LLMConfig
from grader.sandbox.base import BACKENDS


@pytest.fixture
def echo_backend() -> Iterator[str]:
    BACKENDS.add("echo-test", "grader.sandbox.local:LocalSandbox", doc="a second name, for this test")
    try:
        yield "echo-test"
    finally:
        BACKENDS._entries.pop("echo-test")  # the registry has no removal: tests only


def test_a_registered_backend_is_accepted_by_the_config_and_the_cli(echo_backend: str) -> None:
    assert LLMConfig(model="m", sandbox=echo_backend).sandbox == echo_backend
    args = build_parser().parse_args(
        ["grade", "g.json", "--out", "o", "--grader", "llm", "--sandbox", echo_backend]
    )
    assert config_from_args(LLMConfig, args)["sandbox"] == echo_backend


def test_an_unknown_backend_is_refused_naming_the_registered_ones() -> None:
    with pytest.raises(UnknownName, match=r"no sandbox backend 'nowhere': registered are 'docker', 'local'"):
        LLMConfig(model="m", sandbox="nowhere")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["grade", "g.json", "--out", "o", "--sandbox", "nowhere"])


def test_none_still_means_no_run_tool() -> None:
    args = build_parser().parse_args(
        ["grade", "g.json", "--out", "o", "--grader", "llm", "--sandbox", "none"]
    )
    assert config_from_args(LLMConfig, args)["sandbox"] is None
    assert LLMConfig(model="m", sandbox=None).sandbox is None
