"""`gagar`'s help: a version, an example per command that parses, LLM options apart, each default once."""

from __future__ import annotations

import argparse
import re
import shlex
import warnings
from importlib.metadata import version
from pathlib import Path

import pytest

from grader.cli.commands import build_parser, main
from grader.cli.examples import EXAMPLES, commands
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


ACRONYMS = {"API", "CPU", "GGUF", "GRPO", "HTML", "JSON", "JSONL", "LLM", "PNG", "SGD", "URL", "SWE", "SFT"}
PLACEHOLDERS = {"DIR", "NAME", "OWNER", "OWNER__NAME", "RUN_DIR", "TARGET", "GROUP", "COMMAND", "SECONDS"}
ENVIRONMENT = {"OPENAI_API_KEY", "$GAGAR_BENCHMARKS", "GAGAR_SERVER_CACHE"}


def test_help_speaks_to_users_not_in_the_codes_words() -> None:
    parser = build_parser()
    for name, command in {"": parser, **commands(parser)}.items():
        texts = [command.description or ""] + [
            action.help or "" for action in command._actions if action.help != argparse.SUPPRESS
        ]
        for text in texts:
            where = (name, text)
            assert "`" not in text, where  # markdown or RST quoting, shown as is on a terminal
            assert "../" not in text and "grader/" not in text and ".py" not in text, where
            assert not re.search(r"\b[A-Z][a-z]+[A-Z]?[a-z]*\.[a-z_]+\b", text), where  # Limits.timeout
            capitals = set(re.findall(r"\$?\b[A-Z][A-Z0-9_]{2,}\b", text))
            assert capitals <= ACRONYMS | PLACEHOLDERS | ENVIRONMENT, where  # BACKENDS
            assert "(default: True)" not in text and "(default: False)" not in text, where


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def test_an_option_has_one_name_and_one_meaning_on_every_command() -> None:
    found = commands(build_parser())
    by_dest: dict[str, set[tuple[str, ...]]] = {}
    for command in found.values():
        for action in command._actions:
            if action.option_strings and action.help != argparse.SUPPRESS:
                # --offline and --offline/--no-offline are one name: the negative form is argparse's
                named = tuple(flag for flag in action.option_strings if not flag.startswith("--no-"))
                by_dest.setdefault(action.dest, set()).add(named)
    renamed = {dest: flags for dest, flags in by_dest.items() if len(flags) > 1}
    assert renamed == {}, "one setting spelled two ways across commands"
    grade, distill = _flags(found["grade"]), _flags(found["distill"])
    for flag in ("--tool-mode", "--structured", "--model", "--base-url", "--max-turns", "--sandbox"):
        assert distill[flag].help == grade[flag].help and distill[flag].choices == grade[flag].choices, flag


def test_distill_refuses_a_teacher_that_cannot_call_tools_natively(tmp_path: Path) -> None:
    argv = ["distill", "g.json", "--reference", "r.json", "--out", str(tmp_path), "--model", "teacher"]
    from grader.distill.cli import teacher_options

    assert "tool_mode" not in teacher_options(build_parser().parse_args(argv))
    for extra in (["--tool-mode", "text"], ["--tool-mode", "text", "--structured"]):
        with pytest.raises(ValueError, match="takes --tool-mode native only"):
            teacher_options(build_parser().parse_args([*argv, *extra]))


def test_grader_cli_main_is_the_command_function_whatever_was_imported_first() -> None:
    # `grader.cli` was a module whose `main` a user's script may import. Its package keeps that name; the
    # commands' module is not called `main`, which once imported would shadow the function on the package.
    import grader.cli.commands
    from grader.cli import main

    assert main is grader.cli.commands.main
