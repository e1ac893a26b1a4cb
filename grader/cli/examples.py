"""A worked example at the end of each `gagar` command's help (argparse epilog), apart from the parsers.

Every line that starts with `gagar ` must parse with the real parser (`tests/cli/test_cli_help.py` checks it),
so an example cannot drift from the options it shows. The files named are the repository's own examples.
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
  gagar grade groups.jsonl --out runs/llm --grader llm --model qwen2.5-coder \\
      --base-url http://localhost:8000/v1 --sandbox docker""",
    "workspace": """\
  gagar workspace examples/inventory_group.json --dir /tmp/inventory-ws""",
    "import": """\
  gagar import swebench --instances instances.jsonl --predictions preds.jsonl \\
      --results report.json -o groups.jsonl""",
    "import swebench": """\
  gagar import swebench --instances instances.jsonl --predictions a.jsonl b.jsonl \\
      --results a_report.json b_report.json -o groups.jsonl""",
    "sandbox": """\
  gagar sandbox exec examples/inventory_group.json clean -- python -m pytest -q
  gagar sandbox cleanup""",
    "sandbox exec": """\
  gagar sandbox exec examples/inventory_group.json clean -- python -m pytest -q
  gagar sandbox exec examples/inventory_group.json base --backend local 'ls -la'""",
    "sandbox cleanup": """\
  gagar sandbox cleanup
  gagar sandbox cleanup --all""",
    "images": """\
  gagar images build""",
    "images build": """\
  gagar images build
  gagar images build --offline --force""",
    "env": """\
  gagar env build groups.jsonl""",
    "env build": """\
  gagar env build groups.jsonl --group django__django-11099 --timeout 1800""",
    "eval": """\
  gagar eval --bench examples/benchmark-tiny --out runs/eval
  gagar eval groups.jsonl --reference references.jsonl --out runs/eval --consistency 3""",
    "bench": """\
  gagar bench check examples/benchmark-tiny""",
    "bench check": """\
  gagar bench check examples/benchmark-tiny --no-probes""",
    "bench prepare": """\
  gagar bench prepare swebench-lite --list-sources
  gagar bench prepare swebench-lite --source-root ~/src
  gagar bench prepare swebench-lite-large --source-root ~/src --partial""",
    "bench bundle": """\
  gagar bench bundle ~/src/project 0123456789abcdef0123456789abcdef01234567 \\
      --repository https://github.com/owner/project --out bundles/""",
    "serve": """\
  gagar serve
  gagar serve --server llama-cpp-python --port 8081 --threads 2""",
    "reference": """\
  gagar reference consensus groups.jsonl --k 5 --out references.jsonl""",
    "reference consensus": """\
  gagar reference consensus groups.jsonl --k 5 --threshold 0.8 --out references.jsonl""",
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
  gagar distill groups.jsonl --reference references.jsonl --out sft/ --model teacher \\
      --base-url http://localhost:8000/v1
  gagar distill ~/.cache/gagar/benchmarks/swebench-lite/preference/groups/preference.jsonl \\
      --reference ~/.cache/gagar/benchmarks/swebench-lite/preference/references.dev.jsonl \\
      --out sft-dev/ --model teacher --base-url http://localhost:8000/v1""",
}


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
