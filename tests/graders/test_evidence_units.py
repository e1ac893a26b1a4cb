"""The evidence stage's pure parts: snippet extraction, output normalisation, clustering and signals."""

from __future__ import annotations

from grader.graders.evidence.outcomes import Outcome, exception_of, normalise
from grader.graders.evidence.outcomes import test_results as per_test_results
from grader.graders.evidence.run import Evidence, Probe
from grader.graders.evidence.signals import candidate_signals, clusters, render_table
from grader.graders.evidence.snippets import DEFAULT_TEST_FILE, extract_probes, session

STATEMENT = """Calling `frobnicate` breaks
```python
>>> from lib import frobnicate
>>> frobnicate([1, 2])
Traceback (most recent call last):
  File "<stdin>", line 1, in <module>
ValueError: bad input
>>> frobnicate([])
[]
```

The output of the program:
```
Traceback (most recent call last):
  File "x.py", line 3, in <module>
TypeError: nope
```

    import lib
    lib.run(3)

Shell:
```console
$ pip list | grep lib
lib 1.0
```
"""


def test_doctest_prompts_are_stripped_and_outputs_kept_as_expectations():
    probes = extract_probes(STATEMENT)
    first = probes[0]
    assert first.kind == "repl"
    assert first.source == "from lib import frobnicate\nfrobnicate([1, 2])\nfrobnicate([])"
    assert "ValueError: bad input" in first.expected and first.expected.endswith("[]")


def test_tracebacks_output_and_shell_sessions_are_left_out_and_indented_blocks_kept():
    probes = extract_probes(STATEMENT)
    assert [p.kind for p in probes] == ["repl", "script"]
    assert probes[1].source == "import lib\nlib.run(3)"
    assert all("Traceback" not in p.source and "pip list" not in p.source for p in probes)
    assert [p.name for p in probes] == ["s1", "s2"]


def test_fenced_blocks_with_any_fence_and_ipython_sessions():
    text = "~~~py\nimport a\na.b()\n~~~\n\n```\nIn [3]: x = 1\n   ...: x + 1\nOut[3]: 2\n```\n"
    probes = extract_probes(text)
    assert [(p.kind, p.source) for p in probes] == [("script", "import a\na.b()"), ("repl", "x = 1\nx + 1")]
    assert probes[1].expected == "2"
    assert session("no prompt here") is None


def test_source_excerpts_that_only_define_are_left_out():
    text = "```python\ndef _parse(self, section):\n    return self._format(section)\n```\n"
    assert extract_probes(text) == []


def test_a_test_file_followed_by_its_commands_becomes_file_probes():
    text = (
        "```py\nimport pytest\n@pytest.mark.skip\ndef test_loc():\n    assert 0\n```\n"
        "running with `pytest -rs` is fine, but `pytest -rs --runxfail` is not.\n"
        "Also `pytest -k 'a or b' x.py; rm -rf /` must not pass.\n"
    )
    probes = extract_probes(text)
    assert [(p.kind, p.filename, p.command) for p in probes] == [
        ("file", DEFAULT_TEST_FILE, ("pytest", "-rs", DEFAULT_TEST_FILE)),
        ("file", DEFAULT_TEST_FILE, ("pytest", "-rs", "--runxfail", DEFAULT_TEST_FILE)),
    ]
    named = extract_probes("```python\ndef test_a():\n    pass\n```\n$ python -m pytest test_bug.py -x\n")
    assert [(p.filename, p.command) for p in named] == [("test_bug.py", ("pytest", "test_bug.py", "-x"))]


def test_normalise_strips_addresses_timings_paths_and_headers():
    text = (
        "platform linux -- Python 3.9.2, pytest-5.4\nrootdir: /tmp/tmp.abc\n"
        "<Foo object at 0x7f3a2b1c4d50> id 0xdeadbeef\n"
        'File "/work/tree/lib/core.py", line 42, in run\n'
        "/tmp/tmp.XYZ/test_statement.py:3: unconditional skip\n"
        "1 passed in 0.12s\nfinished in 3.5 seconds at 2024-01-02 10:11:12\n"
    )
    out = normalise(text, tree="/work/tree", scratch="/tmp/tmp.XYZ")
    assert out == (
        "<Foo object at 0x?> id 0x?\n"
        'File "<tree>/lib/core.py", line N, in run\n'
        "<tmp>/test_statement.py:N: unconditional skip\n"
        "1 passed <t>\nfinished <t> at <clock>"
    )
    assert normalise(text, "/work/tree", "/tmp/tmp.XYZ") == normalise(
        text.replace("0x7f3a2b1c4d50", "0x55aa").replace("0.12s", "9.80s"), "/work/tree", "/tmp/tmp.XYZ"
    )


def test_exception_and_per_test_outcomes_are_read():
    assert exception_of("gagar-evidence-exception: KeyError | lib/a.py in get\n", "") == (
        "KeyError",
        "lib/a.py in get",
    )
    assert exception_of("", "Traceback ...\nE   ZeroDivisionError: division by zero\n") == (
        "ZeroDivisionError",
        "",
    )
    assert exception_of("all fine", "") == ("", "")
    pytest_out = "PASSED tests/t.py::test_a\nFAILED tests/t.py::test_b - assert 0\nXFAIL tests/t.py::test_c\n"
    assert per_test_results(pytest_out) == {
        "tests/t.py::test_a": True,
        "tests/t.py::test_b": False,
        "tests/t.py::test_c": True,
    }
    unittest_out = (
        "test_mul (tests.test_core.MulTest.test_mul) ... FAIL\ntest_x (tests.t.X) ... skipped 'no'\n"
    )
    assert per_test_results(unittest_out) == {
        "tests.test_core.MulTest::test_mul": False,
        "tests.t.X::test_x": True,
    }
    sympy_out = "sympy/core/tests/test_basic.py[3]\ntest_one ok\ntest_two F\ntest_three E\n"
    assert per_test_results(sympy_out) == {
        "sympy/core/tests/test_basic.py::test_one": True,
        "sympy/core/tests/test_basic.py::test_two": False,
        "sympy/core/tests/test_basic.py::test_three": False,
    }


def _evidence() -> Evidence:
    ok = Outcome("ok", 0, output="[1, 2]")
    raises = Outcome("failed", 1, "ValueError", "lib/a.py in f", "ValueError: bad")
    other = Outcome("ok", 0, output="[2, 1]")
    crash = Outcome("failed", 1, "TypeError", "", "TypeError: x")
    probe = Probe("s1", "repl", "cmd", (), 60.0, "s1: frobnicate([1, 2])")
    tests = Probe("tests", "tests", "cmd", (), 60.0, "tests: t.py")
    passing = {"t.py::a": True, "t.py::b": True}
    return Evidence(
        "g",
        probes=[probe, tests],
        candidates=["right1", "right2", "wrong", "same", "crashy"],
        outcomes={
            "s1": {
                "base": raises,
                "right1": ok,
                "right2": ok,
                "wrong": other,
                "same": raises,
                "crashy": crash,
            },
            "tests": {
                "base": Outcome("ok", 0, tests=passing),
                "right1": Outcome("ok", 0, tests=passing),
                "right2": Outcome("ok", 0, tests=passing),
                "wrong": Outcome("failed", 1, tests={"t.py::a": True, "t.py::b": False}),
                "same": Outcome("ok", 0, tests=passing),
                "crashy": Outcome("ok", 0, tests=passing),
            },
        },
    )


def test_clusters_group_equal_behaviour_largest_first():
    evidence = _evidence()
    got = clusters(evidence.outcomes["s1"], evidence.candidates)
    assert got == [["right1", "right2"], ["wrong"], ["same"], ["crashy"]]
    assert clusters({"a": Outcome("not-run")}, ["a"]) == []


def test_signals_name_what_each_candidate_did():
    signals = candidate_signals(_evidence())
    counts = {c: {k: v for k, v in s.items() if k != "probes" and v} for c, s in signals.items()}
    assert counts == {
        "right1": {},
        "right2": {},
        "wrong": {"regressions": 1, "minority": 1},
        "same": {"still_raises": 1, "unchanged": 1},
        "crashy": {"minority": 1},
    }
    assert signals["wrong"]["probes"]["regressions"] == ["tests:t.py::b"]


def test_a_tie_for_the_largest_cluster_says_nothing():
    evidence = _evidence()
    evidence.outcomes["s1"]["right2"] = Outcome("ok", 0, output="[3]")
    signals = candidate_signals(evidence)
    assert all(s["minority"] == 0 for s in signals.values())


def test_the_table_shows_every_target_and_the_clusters():
    table = render_table(_evidence(), labels={"right1": "A", "right2": "B"})
    assert "s1" in table and "A B | wrong | crashy" in table
    assert "= base" in table and "1 failed" in table
    assert render_table(Evidence("g", skipped="no environment")) == (
        "Execution evidence: not gathered (no environment)."
    )


def test_timeouts_are_shown_but_read_by_no_signal():
    evidence = _evidence()
    evidence.outcomes["s1"]["wrong"] = Outcome("timeout", 124)
    evidence.outcomes["s1"]["same"] = Outcome("timeout", 124)
    signals = candidate_signals(evidence)
    assert signals["same"]["unchanged"] == 0 and signals["same"]["new_crashes"] == 0
    assert signals["wrong"]["minority"] == 0 and signals["wrong"]["regressions"] == 1
    assert "timeout" in render_table(evidence)
    evidence.outcomes["s1"]["base"] = Outcome("timeout", 124)
    assert all(
        s["still_raises"] == s["unchanged"] == s["minority"] == 0
        for s in candidate_signals(evidence).values()
    )
