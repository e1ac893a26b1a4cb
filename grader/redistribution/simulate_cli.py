"""`gagar simulate`: run the GRPO simulation of `grader.redistribution.simulate` and write its table and plot.

Writes to the output folder: `table.txt` (the table as printed), `simulation.json` (the config, the table's
rows and each series averaged over seeds) and `simulation.png` (needs matplotlib, the `plot` extra: without it
the plot is skipped, and the command says so; `--no-plot` skips it on purpose).
"""

from __future__ import annotations

import argparse
import io
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from grader.cli.options import add_config_arguments
from grader.cli.options import config_from_args as config_from_options
from grader.pipeline import GradingOptions
from grader.redistribution.simulate import AGGREGATIONS, ARMS, SimulationConfig, SimulationResult, simulate
from grader.util.atomic import write_text_atomic

TABLE = "table.txt"
DATA = "simulation.json"
PLOT = "simulation.png"
SMOOTH = (
    25  # steps in the moving average of the plotted update norm: one step's norm is mostly sampling noise
)
PLOT_EXTRA = "pip install 'gagar[plot]'"
ARM_MEANINGS = {
    "grpo": "plain GRPO, advantages unchanged",
    "gagar-sequence": "GAGAR, a group's sum of passing advantages preserved per sequence (sum a)",
    "gagar-token": "GAGAR, preserved per token (sum a * length)",
    "gagar-none": "GAGAR, no preservation (a * w, not rescaled)",
}
"""What each arm of `grader.redistribution.simulate.ARMS` is, for the table's legend and the plot's."""


def _names(text: str, known: tuple[str, ...], what: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown {what} {', '.join(unknown) or '(none)'}; known: {', '.join(known)}"
        )
    return names


SCHEME_FIELDS = ("scheme", "floor", "decay", "top_k")
"""GradingOptions' fields that say the weight scheme: `gagar simulate` takes them as `gagar grade` does."""


def config_from_args(args: argparse.Namespace) -> SimulationConfig:
    """The simulation the command line asks for. Raises ValueError naming the first bad value."""
    scheme = GradingOptions(**config_from_options(GradingOptions, args, SCHEME_FIELDS))
    config = SimulationConfig(
        **config_from_options(SimulationConfig, args),
        scheme=scheme.scheme,
        scheme_params=scheme.weight_params(),
        arms=args.arms,
        aggregations=args.aggregations,
    )
    config.validate()
    return config


def _pm(value: tuple[float, float], digits: int) -> str:
    return f"{value[0]:.{digits}f} ± {value[1]:.{digits}f}"


def summary_table(result: SimulationResult) -> Table:
    """The table `gagar simulate` prints: one row per (arm, loss aggregation)."""
    config = result.config
    table = Table(
        title=f"simulation: {config.steps} steps x {config.seeds} seeds, {config.groups} groups of "
        f"{config.group_size}; grader noise {config.grader_noise:g}, position bias {config.position_bias:g}",
        show_edge=False,
        pad_edge=False,
    )
    columns = [
        ("arm", "left"),
        ("loss", "left"),
        ("clean share", "right"),
        ("edits tests", "right"),
        ("mean tokens", "right"),
        ("pass", "right"),
        ("mass var", "right"),
        ("|mass - grpo|", "right"),
        ("norm var", "right"),
        ("seq credit chg", "right"),
        ("token credit chg", "right"),
    ]
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for row in result.summary():
        edits = row["edits_tests_end"]
        table.add_row(
            row["arm"],
            row["aggregation"],
            f"{row['clean_start']:.2f} -> {_pm(row['clean_end'], 3)}",
            "-" if edits is None else f"{edits[0]:.3f}",
            f"{row['tokens_start']:,.0f} -> {row['tokens_end'][0]:,.0f}",
            f"{row['pass_end'][0]:.3f}",
            f"{row['mass_variance']:.2e}",
            f"{row['mass_change']:.2e}",
            f"{row['norm_variance']:.2e}",
            f"{row['sequence_credit_change']:.1e}",
            f"{row['token_credit_change']:.1e}",
        )
    return table


LEGEND = """\
{arms}
clean share, edits tests, pass: policy share of the clean fixes (any length) and of test-editing fixes, and
  the share of passing rollouts: start -> mean of the last 10% of steps (± sd over seeds)
mean tokens: expected response length under the policy, start -> end
mass var, norm var: step-to-step variance (half the mean squared difference of consecutive steps) of the
  step's advantage mass (the loss coefficients summed over its rollouts) and of the update's L2 norm
|mass - grpo|: mean distance of the step's advantage mass from plain GRPO's on the same rollouts
seq / token credit chg: largest relative change of a group's passing sum(a) / sum(a * len) in any step
This is a simulation: a softmax policy over scripted behaviours, not a model."""


def render_table(result: SimulationResult, width: int = 180) -> str:
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, highlight=False)
    console.print(summary_table(result))
    arms = "\n".join(f"{arm}: {ARM_MEANINGS[arm]}" for arm in dict.fromkeys(arm for arm, _ in result.runs))
    console.print(LEGEND.format(arms=arms))
    return "".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines())


def series_payload(result: SimulationResult) -> dict[str, Any]:
    """Config, table rows and every per-step series averaged over seeds, as JSON-ready values."""
    config = result.config
    series = {}
    for r, (arm, aggregation) in enumerate(result.runs):
        series[f"{arm}/{aggregation}"] = {
            name: np.round(getattr(result, name)[r].mean(axis=0), 8).tolist()
            for name in ("clean_share", "mean_tokens", "pass_rate", "mass", "mass_grpo", "update_norm")
        }
    return {
        "note": "a simulation: a softmax policy over scripted code-agent behaviours "
        "(grader.redistribution.simulate)",
        "config": {k: v if not isinstance(v, tuple) else list(v) for k, v in vars(config).items()},
        "behaviours": [vars(b) for b in result.behaviours],
        "summary": result.summary(),
        "series": series,
    }


def _smooth(values: np.ndarray, window: int) -> np.ndarray:
    if len(values) < window:
        return values
    kernel = np.ones(window) / window
    return np.convolve(values, kernel, mode="valid")


def write_plot(result: SimulationResult, path: Path) -> Path:
    """The clean share, mean length and smoothed update norm over steps, one column per loss aggregation.

    Raises RuntimeError when matplotlib is not installed.
    """
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # an optional extra: the simulation itself needs only numpy
        raise RuntimeError(f"the plot needs matplotlib: {PLOT_EXTRA} (or pass --no-plot)") from exc
    aggregations = list(dict.fromkeys(aggregation for _, aggregation in result.runs))
    arms = list(dict.fromkeys(arm for arm, _ in result.runs))
    rows = [
        ("clean_share", "clean share"),
        ("mean_tokens", "mean tokens"),
        ("update_norm", f"update norm ({SMOOTH}-step mean)"),
    ]
    figure = Figure(figsize=(5.5 * len(aggregations), 3.0 * len(rows)), layout="constrained")
    axes = figure.subplots(len(rows), len(aggregations), squeeze=False, sharex=True)
    steps = np.arange(result.config.steps)
    colours = dict(zip(ARMS, ("#6e7781", "#0969da", "#1a7f37", "#cf222e"), strict=True))
    for column, aggregation in enumerate(aggregations):
        for row, (name, label) in enumerate(rows):
            ax = axes[row][column]
            for arm in arms:
                values = getattr(result, name)[result.run_index(arm, aggregation)]
                mean, low, high = values.mean(axis=0), values.min(axis=0), values.max(axis=0)
                x = steps
                if name == "update_norm":
                    mean, low, high = (_smooth(v, SMOOTH) for v in (mean, low, high))
                    x = steps[len(steps) - len(mean) :]
                ax.plot(x, mean, color=colours[arm], label=f"{arm}: {ARM_MEANINGS[arm]}", linewidth=1.4)
                if name != "update_norm":
                    ax.fill_between(x, low, high, color=colours[arm], alpha=0.12, linewidth=0)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            if row == 0:
                ax.set_title(f"{aggregation} loss")
            if row == len(rows) - 1:
                ax.set_xlabel("step")
    # Below the panels, in full: inside an axis, the arms' descriptions would cover the curves.
    handles, labels = axes[0][0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    config = result.config
    figure.suptitle(
        f"GRPO simulation (not a training run): {config.seeds} seeds, mean and range; "
        f"grader noise {config.grader_noise:g}, position bias {config.position_bias:g}",
        fontsize=10,
    )
    figure.savefig(path, dpi=110)
    return path


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def cmd_simulate(args: argparse.Namespace) -> int:
    """`gagar simulate`: run the simulation, write its table, data and plot (when matplotlib is installed; the
    command says when it skipped it), print the table.

    Raises:
        ValueError: the configuration is invalid (names the field).
    """
    config = config_from_args(args)
    plot = not args.no_plot and _has_matplotlib()  # checked first: the simulation takes seconds
    start = time.perf_counter()
    result = simulate(config)
    seconds = time.perf_counter() - start
    args.out.mkdir(parents=True, exist_ok=True)
    text = render_table(result)
    write_text_atomic(args.out / TABLE, text)
    payload = series_payload(result)
    payload["seconds"] = round(seconds, 3)
    write_text_atomic(args.out / DATA, json.dumps(payload, allow_nan=False) + "\n")
    written = [args.out / TABLE, args.out / DATA]
    if plot:
        written.append(write_plot(result, args.out / PLOT))
    print(text, end="")
    runs = len(result.runs) * config.seeds
    print(f"{runs} runs of {config.steps} steps in {seconds:.1f} s -> {', '.join(str(p) for p in written)}")
    if not plot and not args.no_plot:
        print(f"plot skipped: matplotlib is not installed ({PLOT_EXTRA} adds {PLOT})")
    return 0


def register(subparsers: Any) -> None:
    """Add `simulate` to an argparse subparsers object (gagar's `build_parser`)."""
    parser = subparsers.add_parser(
        "simulate",
        help="a seeded GRPO simulation: plain GRPO vs GAGAR with and without sum preservation",
        description="A simulation, not a training run: a softmax policy over scripted code-agent behaviours "
        "(docs/redistribution.md describes them). Writes table.txt, simulation.json and simulation.png "
        "(with the plot extra) to --out, and prints the table and the time it took.",
    )
    parser.add_argument("--out", required=True, type=Path, help="folder for table.txt, simulation.json, .png")
    add_config_arguments(parser, SimulationConfig)
    add_config_arguments(parser.add_argument_group("weight scheme"), GradingOptions, SCHEME_FIELDS)
    parser.add_argument(
        "--arms",
        type=lambda text: _names(text, tuple(ARMS), "arm"),
        default=tuple(ARMS),
        help=f"comma-separated, from {','.join(ARMS)} (default: all)",
    )
    parser.add_argument(
        "--aggregations",
        type=lambda text: _names(text, AGGREGATIONS, "aggregation"),
        default=AGGREGATIONS,
        help=f"comma-separated, from {','.join(AGGREGATIONS)} (default: both)",
    )
    parser.add_argument(
        "--no-plot",
        action="store_true",
        help="skip the PNG (skipped anyway, with a note, without matplotlib)",
    )
    parser.set_defaults(func=cmd_simulate)
