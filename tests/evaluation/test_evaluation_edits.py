"""The source edits behind `gagar degrade`, on Python shapes other than the bundled example's."""

from __future__ import annotations

import ast
import textwrap

import pytest

from grader.evaluation import edits
from grader.evaluation.edits import NotApplicable

METHOD = textwrap.dedent(
    '''\
    class Cart:
    \tdef total(self, prices, discount=0):
    \t\t"""Sum after discount."""
    \t\tsubtotal = sum(prices)
    \t\treturn subtotal - discount
    '''
)


def lines_of(source: str, needle: str) -> list[int]:
    return [n for n, line in enumerate(source.splitlines(), 1) if needle in line]


def test_debug_print_goes_after_the_docstring_with_the_files_indentation() -> None:
    edit = edits.insert_debug_print(METHOD, lines_of(METHOD, "return"))
    assert '\t\tprint("DEBUG total: prices =", prices)\n\t\tsubtotal' in edit.source  # not self, a tab
    assert edit.note == "prints prices at the start of total()"


def test_debug_print_outside_any_function_goes_before_the_changed_statement() -> None:
    source = "LIMIT = 3\nif LIMIT:\n    VALUE = LIMIT * 2\n"
    edit = edits.insert_debug_print(source, [3])
    assert edit.source == 'LIMIT = 3\nif LIMIT:\n    print("DEBUG: line 3")\n    VALUE = LIMIT * 2\n'


def test_swallowing_wraps_whole_statements_and_keeps_crlf() -> None:
    source = "def f(x):\r\n    y = parse(\r\n        x)\r\n    return y\r\n"
    edit = edits.swallow_exceptions(source, [3])  # a line inside a multi-line statement
    assert edit.source == (
        "def f(x):\r\n    try:\r\n        y = parse(\r\n            x)\r\n    except Exception:\r\n"
        "        pass\r\n    return y\r\n"
    )


def test_swallowing_never_reindents_a_multiline_string() -> None:
    source = 'def f():\n    s = """a\nb"""\n    return s\n'
    with pytest.raises(NotApplicable):
        edits.swallow_exceptions(source, [2, 3])


def test_rename_is_the_same_program_and_never_touches_parameters() -> None:
    source = "def f(result, items):\n    total = 0\n    for x in items:\n        total += x\n"
    source += "    return f'{total}'\n"
    edit = edits.rename_local(source, [4])
    assert edit.note == "renames total to acc in f()"
    assert "acc += x" in edit.source and "f'{acc}'" in edit.source and "def f(result, items)" in edit.source


def test_rename_skips_a_comprehension_name_also_used_as_a_global() -> None:
    # `x` is bound only in the comprehension, but the last line reads a global x: renaming would change it.
    source = "x = 1\n\ndef f(items):\n    ys = [x for x in items]\n    return ys, x\n"
    edit = edits.rename_local(source, [4])
    assert edit.note == "renames ys to ys_value in f()"
    source = "x = 1\n\ndef f(items):\n    return [x for x in items], x\n"
    with pytest.raises(NotApplicable):
        edits.rename_local(source, [4])


def test_commented_out_code_uses_the_replaced_lines_when_there_are_some() -> None:
    source = "def f(a):\n    if a:\n        return 2\n    return 1\n"
    edit = edits.comment_out_code(source, [3], old_code=["        return 1 + 1", ""])
    assert edit.source == "def f(a):\n    if a:\n        # return 1 + 1\n        return 2\n    return 1\n"
    copy = edits.comment_out_code(source, [2, 3])
    assert "    # if a:\n    #     return 2\n    if a:" in copy.source


def test_weakening_a_test_prefers_the_changed_name_and_keeps_a_body() -> None:
    source = (
        "def test_other():\n    assert other(1) == 2\n\n"
        "def test_target():\n    assert target(1) > 0\n\n"
        "def test_target_eq():\n    assert target(2) == 4, 'msg'\n"
    )
    edit = edits.weaken_assertion(source, prefer=["target"])
    assert "    # assert target(1) > 0\n    pass\n" in edit.source  # its only statement: a body is kept
    avoided = edits.weaken_assertion(source, prefer=["target"], avoid_lines=[5])
    assert "assert target(2) in (4, None), 'msg'" in avoided.source
    with pytest.raises(NotApplicable):
        edits.weaken_assertion("def helper():\n    assert x\n")


def test_reformat_leaves_the_syntax_tree_alone() -> None:
    source = "from os import path, sep as separator\nimport sys\n\nNAMES = ['a', 'b', \"c\"]\n"
    edit = edits.reformat(source)
    assert "from os import (\n    path,\n    sep as separator,\n)\n" in edit.source
    assert 'NAMES = ["a", "b", "c"]' in edit.source  # to the quote the file uses least: a visible restyle
    assert ast.dump(ast.parse(edit.source)) == ast.dump(ast.parse(source))
    with pytest.raises(NotApplicable):
        edits.reformat("import sys\n\nX = 1\n")


def test_a_reproduction_script_imports_what_changed() -> None:
    script = edits.reproduction_script("pkg.mod", "Cart")
    assert "from pkg.mod import Cart" in script
    ast.parse(script)
    assert "import pkg.mod" in edits.reproduction_script("pkg.mod", None)
    assert edits.top_level_name(METHOD, 5) == "Cart"
