"""A worked example at the end of each `gagar` command's help (argparse epilog), apart from the parsers.

Every line that starts with `gagar ` must parse with the real parser (`tests/cli/test_cli_help.py` checks it)
and run, exit 0 and make what it promises (`tests/cli/test_help_examples.py` runs each), so an example cannot
drift from the options it shows. The files named are the repository's own examples where one fits.
"""

from __future__ import annotations

import argparse

EXAMPLES: dict[str, str] = {
    "": """\
  gagar grade examples/inventory_group.json --out runs/example
  gagar show runs/example
  gagar report runs/example""",
    "grade": """\
  gagar grade examples/inventory_group.json --out runs/example
  gagar grade examples/inventory_group.json --out runs/llm --grader llm --model gemma-3-270m \\
      --base-url http://127.0.0.1:8080/v1""",
    "workspace": """\
  gagar workspace examples/inventory_group.json --dir runs/inventory-ws""",
    "import": """\
  gagar import swebench --instances instances.jsonl --predictions preds.jsonl \\
      --results report.json -o groups.jsonl""",
    "import swebench": """\
  gagar import swebench --instances instances.jsonl --predictions a.jsonl b.jsonl \\
      --results a_report.json b_report.json --repo-root ~/src -o groups.jsonl""",
    "sandbox": """\
  gagar sandbox exec examples/inventory_group.json clean -- python -m pytest -q
  gagar sandbox cleanup""",
    "sandbox exec": """\
  gagar sandbox exec examples/inventory_group.json clean -- python -m pytest -q
  gagar sandbox exec examples/inventory_group.json base --backend local 'ls -la'""",
    "sandbox cleanup": """\
  gagar sandbox cleanup""",
    "images": """\
  gagar images build""",
    "images build": """\
  gagar images build
  gagar images build --offline""",
    "env": """\
  gagar env build examples/inventory_group.json""",
    "env build": """\
  gagar env build ~/.cache/gagar/benchmarks/swebench-lite/verification/groups/verification.jsonl \\
      --group pytest-dev__pytest-7373 --timeout 1800""",
    "eval": """\
  gagar eval --bench examples/benchmark-tiny --out runs/eval
  gagar eval examples/degraded/groups.jsonl --reference examples/degraded/reference.json \\
      --out runs/eval-degraded --consistency 3""",
    "bench": """\
  gagar bench check examples/benchmark-tiny""",
    "bench check": """\
  gagar bench check examples/benchmark-tiny --no-probes""",
    "bench prepare": """\
  gagar bench prepare swebench-lite --list-sources
  gagar bench prepare swebench-lite --source-root ~/src
  gagar bench prepare swebench-lite-large --source-root ~/src --partial""",
    "bench bundle": """\
  gagar bench bundle ~/src/pytest-dev/pytest 2051e30b9b596e944524ccb787ed20f9f5be93e3 \\
      --repository pytest-dev/pytest --out bundles/pytest-5227.bundle""",
    "serve": """\
  gagar serve
  gagar serve --server llama-cpp-python --port 8081 --threads 2""",
    "reference": """\
  gagar reference consensus examples/degraded/groups.jsonl --k 5 --out runs/references.jsonl""",
    "reference consensus": """\
  gagar reference consensus examples/degraded/groups.jsonl --k 5 --threshold 0.8 \\
      --out runs/references.jsonl""",
    "degrade": """\
  gagar degrade examples/inventory_group.json --clean clean --out degraded/""",
    "show": """\
  gagar show runs/example
  gagar show runs/example inventory-average-empty --full""",
    "report": """\
  gagar report runs/example -o report.html""",
    "trend": """\
  gagar trend runs/step-1 runs/step-2 runs/step-3 --window 3""",
    "diff": """\
  gagar diff runs/example inventory-average-empty clean leftover-script""",
    "simulate": """\
  gagar simulate --out runs/simulation --steps 200 --seeds 3""",
    "distill": """\
  gagar distill examples/degraded/groups.jsonl --reference examples/degraded/reference.json \\
      --out runs/sft --model teacher --base-url http://localhost:8000/v1
  gagar distill ~/.cache/gagar/benchmarks/swebench-lite/preference/groups/preference.jsonl \\
      --reference ~/.cache/gagar/benchmarks/swebench-lite/preference/references.dev.jsonl \\
      --out sft-dev/ --model teacher --base-url http://localhost:8000/v1""",
}
"""Each runs as written in a folder holding the repository's examples/ (tests/cli/test_help_examples.py runs
them all): the first lines need nothing else, later ones what earlier ones made (runs/example), a prepared
swebench-lite (bench prepare), copies of its sources in ~/src (DIR/OWNER/NAME) or a server on the port the
line names (gagar serve; any OpenAI-compatible endpoint)."""


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> dict[str, argparse.ArgumentParser]:
    """Every command under `parser` by its words after `gagar` ("import swebench"), groups of commands too."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found[" ".join((*path, name))] = child
                found.update(commands(child, (*path, name)))
    return found


def add_examples(parser: argparse.ArgumentParser) -> None:
    """Give each command of `parser` that has one its example, as an epilog printed verbatim."""
    for name, command in {"": parser, **commands(parser)}.items():
        if name in EXAMPLES:
            command.epilog = "example:\n" + EXAMPLES[name]
            command.formatter_class = argparse.RawDescriptionHelpFormatter
