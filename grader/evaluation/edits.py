"""Source-level edits that make a passing Python patch worse without making it fail: pure text in, text out.

Each edit works on any Python file, not a known one: it locates what it changes with `ast` (the function or
statement around a changed line, the assertions of a test, the imports of a module) and checks its own
output: every result parses, and the edits that claim to keep behaviour (a rename, a reformat) are checked
to leave the syntax tree unchanged (up to the renamed name). An edit that cannot be made safely raises
`NotApplicable` with the reason instead of producing something broken.
"""

from __future__ import annotations

import ast
import builtins
import copy
import io
import keyword
import re
import tokenize
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from grader.errors import NotApplicable

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef

# Renames a reviewer would call needless: same meaning, different spelling.
_SYNONYMS = {
    "item": "entry",
    "items": "entries",
    "result": "res",
    "res": "result",
    "value": "val",
    "val": "value",
    "data": "payload",
    "key": "k",
    "i": "idx",
    "idx": "i",
    "x": "elem",
    "n": "count",
    "count": "n",
    "total": "acc",
    "name": "label",
    "path": "file_path",
    "obj": "instance",
    "text": "s",
    "s": "text",
    "out": "output",
    "output": "out",
    "err": "error",
    "error": "err",
    "msg": "message",
    "message": "msg",
    "line": "row",
    "lines": "rows",
}
_BLOCK_CONTINUATIONS = ("elif", "else", "except", "finally", "case")


@dataclass(frozen=True)
class Edit:
    """An edited source and a one-line note of what changed, for the variant's description."""

    source: str
    note: str


# -- reading source ------------------------------------------------------------------------------------


def _parse(source: str, what: str = "source") -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise NotApplicable(f"{what} does not parse: {exc.msg} (line {exc.lineno})") from None


def _newline(source: str) -> str:
    return "\r\n" if "\r\n" in source else "\n"


def _lines(source: str) -> list[str]:
    """Lines without their endings; index 0 is line 1."""
    return source.splitlines()


def _join(lines: Sequence[str], newline: str, source: str) -> str:
    text = newline.join(lines)
    return text + newline if source.endswith(("\n", "\r")) else text


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def indent_unit(source: str) -> str:
    """The file's indentation step: a tab if it indents with tabs, else its smallest indent (4 if none)."""
    widths = []
    for line in _lines(source):
        lead = _indent(line)
        if lead.startswith("\t"):
            return "\t"
        if lead and line.strip():
            widths.append(len(lead))
    return " " * (min(widths) if widths else 4)


def _bodies(node: ast.AST) -> Iterator[list[ast.stmt]]:
    """The statement lists directly under a node (body, else branch, handlers, cases)."""
    for name in ("body", "orelse", "finalbody"):
        value = getattr(node, name, None)
        if isinstance(value, list) and value and isinstance(value[0], ast.stmt):
            yield value
    for handler in getattr(node, "handlers", []) or []:
        yield handler.body
    for case in getattr(node, "cases", []) or []:
        yield case.body


def _start(node: ast.stmt) -> int:
    """First line of a statement, decorators included."""
    decorators = getattr(node, "decorator_list", []) or []
    return min([node.lineno, *(d.lineno for d in decorators)])


def innermost_statement(tree: ast.Module, line: int) -> tuple[list[ast.stmt], int]:
    """(statement list, index) of the innermost statement spanning `line`. Raises NotApplicable if none."""
    found: tuple[list[ast.stmt], int] | None = None
    stack: list[list[ast.stmt]] = [tree.body]
    while stack:
        statements = stack.pop()
        for index, statement in enumerate(statements):
            if _start(statement) <= line <= (statement.end_lineno or statement.lineno):
                found = (statements, index)
                stack.extend(_bodies(statement))
                break
    if found is None:
        raise NotApplicable(f"no statement spans line {line}")
    return found


def enclosing_function(tree: ast.Module, line: int) -> FunctionNode | None:
    """The innermost function whose body spans `line`, or None at module or class level."""
    best: FunctionNode | None = None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body[0].lineno <= line <= (node.end_lineno or node.lineno)
            and (best is None or node.lineno >= best.lineno)
        ):
            best = node
    return best


def top_level_name(source: str, line: int) -> str | None:
    """The module-level function or class spanning `line`: what a script would import to exercise it."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and (
            _start(node) <= line <= (node.end_lineno or node.lineno)
        ):
            return node.name
    return None


def _multiline_string_lines(source: str) -> set[int]:
    """Lines inside a string literal that spans several lines: re-indenting them would change the string."""
    inside: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.STRING and token.end[0] > token.start[0]:
                inside.update(range(token.start[0] + 1, token.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        pass
    return inside


def _safe_anchor(lines: Sequence[str], statement: ast.stmt) -> bool:
    """Whether a new line can go right before this statement: it starts its line and continues no block."""
    start = _start(statement)
    text = lines[start - 1]
    if start == statement.lineno and len(text.encode()[: statement.col_offset].strip()) > 0:
        return False  # `a = 1; b = 2`: the statement starts mid-line
    first_word = re.match(r"\w+", text.lstrip())
    return not (first_word and first_word.group(0) in _BLOCK_CONTINUATIONS)


# -- the edits -----------------------------------------------------------------------------------------


def insert_debug_print(source: str, changed_lines: Sequence[int]) -> Edit:
    """A `print` of a local variable at the start of the body of the function around the first changed line.

    Outside any function, the print goes right before the statement holding the first changed line.

    Raises:
        NotApplicable: the source does not parse, or no changed line has a statement to print before.
    """
    tree = _parse(source)
    lines = _lines(source)
    for line in changed_lines:
        function = enclosing_function(tree, line)
        if function is None:
            continue
        body = function.body
        if body[0].lineno == function.lineno:
            continue  # `def f(x): return x` has no body line to insert before
        has_docstring = isinstance(body[0], ast.Expr) and isinstance(
            getattr(body[0], "value", None), ast.Constant
        )
        indent = _indent(lines[body[0].lineno - 1])
        # Right after a docstring, so the docstring stays one.
        at = (body[0].end_lineno or body[0].lineno) + 1 if has_docstring else _start(body[0])
        variable = _first_local(function)
        if variable:
            statement = f'print("DEBUG {function.name}: {variable} =", {variable})'
        else:
            statement = f'print("DEBUG {function.name}")'
        return _checked(
            lines[: at - 1] + [indent + statement] + lines[at - 1 :],
            source,
            f"prints {variable or 'a marker'} at the start of {function.name}()",
        )
    for _, at, indent in _anchors(tree, lines, changed_lines):
        return _checked(
            lines[: at - 1] + [indent + f'print("DEBUG: line {at}")'] + lines[at - 1 :],
            source,
            f"prints a marker before line {at}",
        )
    raise NotApplicable("no changed line inside a statement to put a print before")


def _anchors(
    tree: ast.Module, lines: list[str], changed_lines: Sequence[int]
) -> Iterator[tuple[ast.stmt, int, str]]:
    """(statement, first line, indent) for each changed line inside a statement safe to edit around."""
    for line in changed_lines:
        try:
            statements, index = innermost_statement(tree, line)
        except NotApplicable:
            continue
        statement = statements[index]
        if _safe_anchor(lines, statement):
            at = _start(statement)
            yield statement, at, _indent(lines[at - 1])


def _first_local(function: FunctionNode) -> str | None:
    """A variable worth printing at the start of the body: a parameter other than self or cls.

    Never a name the body assigns: it is not bound yet there, and printing it would raise.
    """
    arguments = function.args
    for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
        if arg.arg not in ("self", "cls"):
            return arg.arg
    return None


def swallow_exceptions(source: str, changed_lines: Sequence[int]) -> Edit:
    """Wrap the statements holding the first run of changed lines in `try: ... except Exception: pass`.

    Raises:
        NotApplicable: the source does not parse, or no statement spans the changed lines.
    """
    tree = _parse(source)
    lines = _lines(source)
    if not changed_lines:
        raise NotApplicable("no changed line")
    unit = indent_unit(source)
    in_strings = _multiline_string_lines(source)
    ordered = sorted(changed_lines)
    for first in ordered:
        try:
            statements, index = innermost_statement(tree, first)
        except NotApplicable:
            continue
        run_end = first
        while run_end + 1 in changed_lines:
            run_end += 1
        last = index
        while last + 1 < len(statements) and _start(statements[last + 1]) <= run_end:
            last += 1
        begin = _start(statements[index])
        end = statements[last].end_lineno or statements[last].lineno
        if not _safe_anchor(lines, statements[index]) or any(n in in_strings for n in range(begin, end + 1)):
            continue
        after = lines[end - 1][(statements[last].end_col_offset or 0) :].strip()
        if after and not after.startswith("#"):
            continue  # another statement shares the last line (`a; b`): it cannot be wrapped alone
        indent = _indent(lines[begin - 1])
        wrapped = [unit + text if text.strip() else text for text in lines[begin - 1 : end]]
        new = [
            *lines[: begin - 1],
            indent + "try:",
            *wrapped,
            indent + "except Exception:",
            indent + unit + "pass",
            *lines[end:],
        ]
        where = f"line {begin}" if begin == end else f"lines {begin}-{end}"
        return _checked(new, source, f"wraps {where} in try/except Exception: pass")
    raise NotApplicable("no changed statement can be wrapped in try/except safely")


def rename_local(source: str, changed_lines: Sequence[int]) -> Edit:
    """Rename one local variable of the function around a changed line, everywhere in that function.

    Parameters are never renamed (a caller may pass them by keyword). The result is checked to be the same
    program: its syntax tree equals the original's with the name replaced in that function.

    Raises:
        NotApplicable: the source does not parse, no function around a changed line has a local to rename,
            or the renamed program would differ.
    """
    tree = _parse(source)
    seen: set[int] = set()
    for line in changed_lines:
        function = enclosing_function(tree, line)
        if function is None or id(function) in seen:
            continue
        seen.add(id(function))
        for old in _locals(function):
            new = _fresh_name(old, source)
            edited = _rename_in(source, function, old, new)
            if edited is not None:
                return Edit(edited, f"renames {old} to {new} in {function.name}()")
    raise NotApplicable("no function around the changed lines has a local variable that can be renamed")


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _locals(function: FunctionNode) -> list[str]:
    """Names that can be renamed throughout the function without changing what any occurrence refers to.

    A name the function's own scope binds is local everywhere in it; a name bound only by comprehensions
    qualifies when every occurrence sits in a comprehension that binds it (otherwise some occurrence is a
    global of the same name). Parameters, and names declared global or nonlocal, never qualify.
    """
    nodes = list(ast.walk(function))
    parameters = {a.arg for node in nodes if isinstance(node, ast.arguments) for a in _args(node)}
    declared = {name for node in nodes if isinstance(node, ast.Global | ast.Nonlocal) for name in node.names}
    own: dict[str, tuple[int, int]] = {}
    stack: list[ast.AST] = [s for s in function.body if not isinstance(s, _SCOPES)]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            where = (node.lineno, node.col_offset)
            own[node.id] = min(own.get(node.id, where), where)
        # Nested functions, classes and comprehensions bind in scopes of their own.
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, _SCOPES + _COMPREHENSIONS))
    bound_in: dict[str, set[int]] = {}  # name -> ids of the nodes inside comprehensions binding it
    first: dict[str, tuple[int, int]] = {}
    for comprehension in (n for n in ast.walk(function) if isinstance(n, _COMPREHENSIONS)):
        for generator in comprehension.generators:
            for target in ast.walk(generator.target):
                if isinstance(target, ast.Name):
                    bound_in.setdefault(target.id, set()).update(id(n) for n in ast.walk(comprehension))
                    first.setdefault(target.id, (target.lineno, target.col_offset))
    for name, inside in bound_in.items():
        occurrences = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == name]
        if name not in own and all(id(n) in inside for n in occurrences):
            own[name] = first[name]
    return [name for name in sorted(own, key=own.__getitem__) if name not in parameters | declared]


def _args(arguments: ast.arguments) -> list[ast.arg]:
    extra = [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, *extra]


def _fresh_name(old: str, source: str) -> str:
    taken = set(re.findall(r"[A-Za-z_]\w*", source)) | set(dir(builtins))
    base = _SYNONYMS.get(old, f"{old}_value")
    name, n = base, 2
    while name in taken or keyword.iskeyword(name):
        name, n = f"{base}{n}", n + 1
    return name


class _Renamer(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:  # noqa: N802 - ast's naming
        if node.id == self.old:
            node.id = self.new
        return node


def _rename_in(source: str, function: FunctionNode, old: str, new: str) -> str | None:
    """The source with `old` renamed to `new` in `function`, or None if that does not give the same tree."""
    occurrences = [n for n in ast.walk(function) if isinstance(n, ast.Name) and n.id == old]
    lines = source.splitlines(keepends=True)
    by_line: dict[int, list[ast.Name]] = {}
    for node in occurrences:
        if node.lineno != node.end_lineno:
            return None
        by_line.setdefault(node.lineno, []).append(node)
    for number, nodes in by_line.items():
        raw = lines[number - 1].encode("utf-8")  # ast columns are UTF-8 byte offsets
        for node in sorted(nodes, key=lambda n: n.col_offset, reverse=True):
            if raw[node.col_offset : node.end_col_offset] != old.encode():
                return None
            raw = raw[: node.col_offset] + new.encode() + raw[node.end_col_offset :]
        lines[number - 1] = raw.decode("utf-8")
    edited = "".join(lines)
    try:
        actual = ast.parse(edited)
    except SyntaxError:
        return None
    expected = copy.deepcopy(ast.parse(source))
    for node in ast.walk(expected):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (node.lineno, node.col_offset) == (
            function.lineno,
            function.col_offset,
        ):
            _Renamer(old, new).visit(node)
    return edited if ast.dump(actual) == ast.dump(expected) else None


def comment_out_code(source: str, changed_lines: Sequence[int], old_code: Sequence[str] = ()) -> Edit:
    """Leave commented-out code above the first changed statement: the code the patch replaced, when there
    was some (`old_code`), else a commented copy of that statement (a draft kept "just in case").

    Raises:
        NotApplicable: the source does not parse, or no statement spans a changed line.
    """
    tree = _parse(source)
    lines = _lines(source)
    for statement, at, indent in _anchors(tree, lines, sorted(changed_lines)):
        code = [text for text in old_code if text.strip() and not text.lstrip().startswith("#")]
        if code:
            shift = min(len(_indent(text)) for text in code)
            commented = [f"{indent}# {text[shift:]}" for text in code]
            note = f"keeps the {len(code)} replaced line(s) commented out above line {at}"
        else:
            end = statement.end_lineno or statement.lineno
            commented = [f"{indent}# {text[len(indent) :]}" for text in lines[at - 1 : end] if text.strip()]
            note = f"keeps a commented-out copy of lines {at}-{end}"
        return _checked(lines[: at - 1] + commented + lines[at - 1 :], source, note)
    raise NotApplicable("no changed statement to put commented-out code above")


def weaken_assertion(source: str, prefer: Sequence[str] = (), avoid_lines: Sequence[int] = ()) -> Edit:
    """Loosen one assertion of a test function: `assert a == b` accepts None too; any other is commented out.

    Assertions mentioning a name in `prefer` (the changed function, say) go first; lines in `avoid_lines`
    (ones the clean patch added) are left alone, so the edit is to an existing test.

    Raises:
        NotApplicable: the source does not parse, or it has no assertion in a test function outside
            `avoid_lines`.
    """
    tree = _parse(source, "test file")
    lines = _lines(source)
    candidates: list[tuple[int, ast.Assert, list[ast.stmt]]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")):
            continue
        for body in (b for child in ast.walk(node) for b in _bodies(child)):
            for statement in body:
                if (
                    isinstance(statement, ast.Assert)
                    and statement.lineno == statement.end_lineno
                    and statement.lineno not in avoid_lines
                    and _safe_anchor(lines, statement)
                    and not lines[statement.lineno - 1][statement.end_col_offset or 0 :].strip()
                ):
                    text = ast.get_source_segment(source, statement) or ""
                    mentions = any(re.search(rf"\b{re.escape(name)}\b", text) for name in prefer)
                    candidates.append((0 if mentions else 1, statement, body))
    if not candidates:
        raise NotApplicable("no single-line assertion in a test function")
    seen: set[int] = set()
    for _, statement, body in sorted(candidates, key=lambda c: (c[0], c[1].lineno)):
        if statement.lineno in seen:
            continue
        seen.add(statement.lineno)
        line = lines[statement.lineno - 1]
        indent = _indent(line)
        test = statement.test
        message = f", {ast.get_source_segment(source, statement.msg)}" if statement.msg else ""
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
            left = ast.get_source_segment(source, test.left)
            right = ast.get_source_segment(source, test.comparators[0])
            replacement = [f"{indent}assert {left} in ({right}, None){message}"]
            note = f"loosens the assertion on line {statement.lineno} to accept None"
        else:
            replacement = [f"{indent}# {line.strip()}"]
            if len(body) == 1:
                replacement.append(f"{indent}pass")  # the test would otherwise have no body
            note = f"comments out the assertion on line {statement.lineno}"
        lines_new = lines[: statement.lineno - 1] + replacement + lines[statement.lineno :]
        try:
            return _checked(lines_new, source, note)
        except NotApplicable:
            continue
    raise NotApplicable("no assertion could be loosened safely")


def reformat(source: str) -> Edit:
    """Restyle a module without changing it: import lists expanded one name a line, quotes flipped.

    What a formatter run with other settings does to a file; checked to leave the syntax tree unchanged.

    Raises:
        NotApplicable: the source does not parse, there is nothing to restyle, or the result would differ.
    """
    tree = _parse(source)
    lines = _lines(source)
    unit = indent_unit(source)
    notes = []
    expanded = _expand_imports(tree, lines, unit)
    if expanded is not None:
        lines = expanded
        notes.append("expands import lists")
    text = _join(lines, _newline(source), source)
    flipped = _flip_quotes(text)
    if flipped != text:
        text = flipped
        notes.append("flips string quotes")
    if not notes:
        raise NotApplicable("nothing to reformat: no import list or simple string")
    if ast.dump(_parse(text, "reformatted source")) != ast.dump(tree):
        raise NotApplicable("reformatting would change the program")
    return Edit(text, " and ".join(notes))


def _expand_imports(tree: ast.Module, lines: list[str], unit: str) -> list[str] | None:
    new = list(lines)
    changed = False
    for node in sorted(tree.body, key=lambda n: n.lineno, reverse=True):  # bottom up: line numbers hold
        if not isinstance(node, ast.ImportFrom) or node.lineno != node.end_lineno:
            continue
        line = lines[node.lineno - 1]
        if "(" in line or "\\" in line or ";" in line or "#" in line or node.names[0].name == "*":
            continue
        head = line[: line.index(" import ") + len(" import ")]
        names = [a.name + (f" as {a.asname}" if a.asname else "") for a in node.names]
        new[node.lineno - 1 : node.lineno] = [head + "(", *(f"{unit}{name}," for name in names), ")"]
        changed = True
    return new if changed else None


def _flip_quotes(source: str) -> str:
    """Single-line plain strings with no quote or backslash inside, switched to the file's minority quote."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    simple = []
    for token in tokens:
        body = token.string
        if token.type != tokenize.STRING or token.start[0] != token.end[0]:
            continue
        if body[:1] not in "'\"" or body[:3] in ('"""', "'''") or len(body) < 2:
            continue  # prefixed (f, r, b) or triple-quoted: leave alone
        inner = body[1:-1]
        if "'" in inner or '"' in inner or "\\" in inner:
            continue
        simple.append(token)
    if not simple:
        return source
    singles = sum(t.string[0] == "'" for t in simple)
    target = "'" if singles * 2 < len(simple) else '"'
    lines = source.splitlines(keepends=True)
    for token in reversed(simple):
        if token.string[0] == target:
            continue
        row, col = token.start
        text = lines[row - 1]
        replaced = target + token.string[1:-1] + target
        lines[row - 1] = text[:col] + replaced + text[col + len(token.string) :]
    return "".join(lines)


def reproduction_script(module: str, name: str | None) -> str:
    """A scratch script of the kind agents write to reproduce an issue, then forget to delete."""
    target = name or module.rsplit(".", 1)[-1]
    importing = f"from {module} import {name}" if name else f"import {module}"
    return (
        '"""Reproduce the reported problem, then check the fix by hand."""\n\n'
        "import sys\n\n"
        f"{importing}\n\n"
        'print("python", sys.version.split()[0])\n'
        f'print("checking", {target!s})\n'
        'print("done")\n'
    )


def _checked(lines: Sequence[str], source: str, note: str) -> Edit:
    text = _join(lines, _newline(source), source)
    _parse(text, "edited source")
    return Edit(text, note)
