"""The GRPO simulation (grader/redistribution/simulate.py) and `gagar simulate`."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from grader.cli.commands import main
from grader.redistribution import redistribute
from grader.redistribution.simulate import (
    SimulationConfig,
    _dense_ranks,
    rank_weight_table,
    simulate,
    step_variance,
)
from tests.conftest import REPO_ROOT

SMALL = {"steps": 60, "seeds": 2, "groups": 8}


def test_a_seed_gives_the_same_result_every_time_and_alone_or_with_others():
    first = simulate(SimulationConfig(**SMALL))
    again = simulate(SimulationConfig(**SMALL))
    for name in ("clean_share", "mean_tokens", "mass", "update_norm", "shares"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
    # Seed 0 of a two-seed run is the one-seed run: each seed has its own stream.
    alone = simulate(SimulationConfig(**{**SMALL, "seeds": 1}))
    np.testing.assert_array_equal(alone.shares[:, 0], first.shares[:, 0])
    other = simulate(SimulationConfig(**{**SMALL, "seed": 1}))
    assert not np.array_equal(other.shares, first.shares)


def test_clean_share_rises_under_gagar_with_an_accurate_grader_and_not_under_grpo():
    config = SimulationConfig(steps=250, seeds=3, groups=16, grader_noise=0.0, position_bias=0.0)
    result = simulate(config)
    rows = {(row["arm"], row["aggregation"]): row for row in result.summary()}
    for aggregation in ("sequence-mean", "token-mean"):
        grpo = rows["grpo", aggregation]["clean_end"][0]
        for arm in ("gagar-sequence", "gagar-token"):
            gagar = rows[arm, aggregation]["clean_end"][0]
            assert gagar > rows[arm, aggregation]["clean_start"] + 0.2, (arm, aggregation, gagar)
            assert gagar > grpo + 0.3, (arm, aggregation, gagar, grpo)
        # Plain GRPO follows the pass rate towards the shortcuts, away from the clean fix.
        assert grpo < rows["grpo", aggregation]["clean_start"]


def test_the_preserving_arms_keep_their_sum_in_every_group_of_every_step():
    result = simulate(SimulationConfig(steps=80, seeds=2, groups=8))
    for aggregation in ("sequence-mean", "token-mean"):
        sequence = result.run_index("gagar-sequence", aggregation)
        token = result.run_index("gagar-token", aggregation)
        none = result.run_index("gagar-none", aggregation)
        assert result.redistributed[sequence].sum() > 100  # the check below is not vacuous
        assert result.sequence_credit_change[sequence].max() < 1e-9
        assert result.token_credit_change[token].max() < 1e-9
        # The other modes do move the quantity they do not preserve.
        assert result.token_credit_change[sequence].max() > 1e-3
        assert result.sequence_credit_change[token].max() > 1e-3
        assert result.sequence_credit_change[none].max() > 1e-3
    # The loss's advantage mass is GRPO's exactly when the preserve mode matches the aggregation.
    seq = result.run_index("gagar-sequence", "sequence-mean")
    tok = result.run_index("gagar-token", "token-mean")
    np.testing.assert_allclose(result.mass[seq], result.mass_grpo[seq], atol=1e-12)
    np.testing.assert_allclose(result.mass[tok], result.mass_grpo[tok], atol=1e-12)
    mismatched = result.run_index("gagar-sequence", "token-mean")
    assert np.abs(result.mass[mismatched] - result.mass_grpo[mismatched]).max() > 1e-4
    grpo = result.run_index("grpo", "sequence-mean")
    assert result.redistributed[grpo].sum() == 0


def test_weights_come_from_rank_to_weights_and_ties_share_a_rank():
    table = rank_weight_table(4, "linear", {"floor": 0.5})
    assert table[3, :3].tolist() == list(redistribute.rank_to_weights([["a"], ["b"], ["c"]]).values())
    assert table[1, 0] == 1.0
    scores = np.array([[0.9, 0.5, 0.9, 0.1, 2.0]])
    passed = np.array([[True, True, True, True, False]])
    ranks, n_ranks = _dense_ranks(scores, passed)
    assert ranks[0, :4].tolist() == [0, 1, 0, 2]
    assert n_ranks.tolist() == [3]


def test_step_variance_ignores_a_steady_trend():
    trend = np.arange(100.0)
    assert step_variance(trend) == pytest.approx(0.5)  # a plain variance would be about 833
    assert step_variance(np.ones(1)) == 0.0


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"steps": 0}, "steps must be a positive integer"),
        ({"group_size": 1}, "group_size must be an integer >= 2"),
        ({"grader_noise": -1.0}, "grader_noise must be a non-negative number"),
        ({"arms": ("grpo", "bogus")}, "arms must be distinct names"),
        ({"scheme_params": {"floor": 0.0}}, "floor must be in (0, 1]"),
    ],
)
def test_a_bad_config_is_an_error_naming_the_field(change, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")):
        simulate(SimulationConfig(**change))


def test_the_cli_writes_the_table_the_data_and_the_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "sim"
    code = main(["simulate", "--out", str(out), "--steps", "40", "--seeds", "2", "--groups", "4"])
    assert code == 0
    table = (out / "table.txt").read_text()
    for arm in ("grpo", "gagar-sequence", "gagar-token", "gagar-none"):
        assert arm in table
    assert "simulation" in table and "40 steps x 2 seeds" in table
    assert table in capsys.readouterr().out
    png = (out / "simulation.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    data = json.loads((out / "simulation.json").read_text())
    assert len(data["summary"]) == 8
    assert len(data["series"]["gagar-token/token-mean"]["clean_share"]) == 40


def test_the_cli_runs_a_subset_without_the_plot(tmp_path):
    out = tmp_path / "sim"
    args = ["simulate", "--out", str(out), "--steps", "10", "--seeds", "1", "--no-plot"]
    assert main([*args, "--arms", "grpo,gagar-none", "--aggregations", "token-mean"]) == 0
    assert not (out / "simulation.png").exists()
    rows = json.loads((out / "simulation.json").read_text())["summary"]
    assert [(r["arm"], r["aggregation"]) for r in rows] == [
        ("grpo", "token-mean"),
        ("gagar-none", "token-mean"),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "0"], "error: steps must be a positive integer, got 0"),
        (["--floor", "1.5"], "error: floor must be in (0, 1], got 1.5"),
        (["--arms", "grpo,ppo"], "unknown arm ppo; known: grpo, gagar-sequence, gagar-token, gagar-none"),
        (["--group-size", "x"], "invalid int value: 'x'"),
    ],
)
def test_a_bad_argument_is_a_clear_error(tmp_path, capsys, args, message):
    out = tmp_path / "sim"
    try:
        code = main(["simulate", "--out", str(out), "--no-plot", *args])
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (out / "table.txt").exists()


def test_without_matplotlib_the_cli_writes_the_table_and_data_and_says_the_plot_was_skipped(tmp_path):
    # A fresh interpreter where `import matplotlib` fails, whether or not it is installed here.
    out = tmp_path / "sim"
    blocked = (
        "import sys; sys.modules['matplotlib'] = None; from grader.cli.commands import main; "
        f"sys.exit(main(['simulate', '--out', {str(out)!r}, '--steps', '10', '--seeds', '1']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", blocked], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert (out / "table.txt").is_file() and (out / "simulation.json").is_file()
    assert not (out / "simulation.png").exists()
    assert "plot skipped: matplotlib is not installed" in proc.stdout
    assert "pip install 'gagar[plot]'" in proc.stdout
    # The table says what each arm is.
    table = (out / "table.txt").read_text()
    assert "gagar-sequence: GAGAR, a group's sum of passing advantages preserved per sequence" in table
    assert "gagar-token: GAGAR, preserved per token" in table
    assert "gagar-none: GAGAR, no preservation" in table
    assert "grpo: plain GRPO" in table
