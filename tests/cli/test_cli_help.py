"""`gagar`'s help: a version, an example per command that parses, LLM options apart, each default once."""

from __future__ import annotations

import argparse
import shlex
import warnings
from importlib.metadata import version

import pytest

from grader.cli.examples import EXAMPLES, commands
from grader.cli.main import build_parser, main
from grader.cli.options import config_from_args
from grader.graders.llm.budgets import Budgets

LLM_GROUP = "llm grader (only with --grader llm)"


def _example_lines(text: str) -> list[list[str]]:
    joined = text.replace("\\\n", " ")  # continuation lines belong to the command above
    return [shlex.split(line)[1:] for line in joined.splitlines() if line.strip().startswith("gagar ")]


def test_version_comes_from_the_package_metadata(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"gagar {version('gagar')}"


def test_every_command_ends_its_help_with_an_example_that_parses() -> None:
    parser = build_parser()
    found = commands(parser)
    assert set(found) - set(EXAMPLES) == set(), "give these commands an example in grader/cli/examples.py"
    assert set(EXAMPLES) - set(found) - {""} == set(), "examples of commands that no longer exist"
    for name, command in {"": parser, **found}.items():
        help_text = command.format_help()
        assert "example:\n  gagar " in help_text, name
        assert help_text.rstrip().endswith(EXAMPLES[name].rstrip()), name
        for argv in _example_lines(EXAMPLES[name]):
            assert name == "" or argv[: len(name.split())] == name.split(), (name, argv)
            build_parser().parse_args(argv)  # SystemExit (and a usage message) if the example is wrong


def _actions(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action, str]]:
    every = []
    for name, command in {"": parser, **commands(parser)}.items():
        for group in command._action_groups:
            every += [(name, action, group.title or "") for action in group._group_actions]
    return every


def test_each_default_is_stated_once() -> None:
    for name, action, _ in _actions(build_parser()):
        text = action.help or ""
        if text != argparse.SUPPRESS:
            assert text.count("(default:") <= 1, (name, action.option_strings, text)
    grade = commands(build_parser())["grade"]
    (builds,) = [a for a in grade._actions if "--max-workspace-builds" in a.option_strings]
    assert "(default: twice the cores" in builds.help and builds.help.count("default") == 1


def test_llm_options_are_a_help_group_of_their_own_and_model_is_not_marked_required() -> None:
    by_flag = {
        flag: (group, action)
        for name, action, group in _actions(build_parser())
        if name == "grade"
        for flag in action.option_strings
    }
    for flag in ("--model", "--base-url", "--max-grading-tokens", "--max-tokens-per-turn", "--sandbox"):
        assert by_flag[flag][0] == LLM_GROUP, flag
    for flag in ("--grader", "--workers", "--scheme", "--max-workspace-builds"):
        assert by_flag[flag][0] != LLM_GROUP, flag
    assert "required" not in (by_flag["--model"][1].help or "")
    help_text = commands(build_parser())["grade"].format_help()
    assert f"\n{LLM_GROUP}:\n" in help_text


def test_the_token_options_say_what_they_limit_and_the_old_spellings_warn() -> None:
    grade = ["grade", "g.json", "--out", "o", "--grader", "llm"]
    args = build_parser().parse_args([*grade, "--max-grading-tokens", "9000", "--max-tokens-per-turn", "512"])
    assert (args.tokens, args.max_output_tokens) == (9000, 512)
    budgets = config_from_args(Budgets, args)
    assert (budgets["tokens"], budgets["max_output_tokens"]) == (9000, 512)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = build_parser().parse_args([*grade, "--max-tokens", "7000", "--max-output-tokens", "256"])
    assert (old.tokens, old.max_output_tokens) == (7000, 256)
    said = sorted(str(w.message) for w in caught if issubclass(w.category, FutureWarning))
    assert said == [
        "--max-output-tokens is deprecated: use --max-tokens-per-turn",
        "--max-tokens is deprecated: use --max-grading-tokens",
    ]
    help_text = commands(build_parser())["grade"].format_help()
    assert "--max-tokens " not in help_text and "--max-output-tokens" not in help_text
    unset = build_parser().parse_args(grade)
    assert (unset.tokens, unset.max_output_tokens) == (Budgets().tokens, Budgets().max_output_tokens)
