"""verl: gagar's weights in verl's GRPO advantages, as one package.

- `advantages`: without a grader in the step. `wrap_compute_advantage` and `install` redistribute the
  advantages verl computes with weights from a function; `with_pass_flag` and `mixed_rows` keep only mixed
  groups; `verl_rows` turns a verl batch into gagar's rows. Imports no verl until called.
- `plugin`: grading inside the step. Importing it registers the reward manager ``gagar`` and the advantage
  estimator ``gagar_grpo`` in verl's registries (so it imports verl, and checks its version first);
  ``plugin.attach(batch_grader, deadline=...)`` submits each step's rows as soon as the trainer sees the
  rewards. ``install_grader``, which wrapped seven verl functions, private ones included, is gone: use
  ``attach`` and set ``algorithm.adv_estimator=gagar_grpo`` (see the plugin's docstring).
- `versions`: the verl releases the hooks are written for (`SUPPORTED_VERL`), which both check.

This package's names are `advantages`' and `versions`' (the module ``grader.integrations.verl`` of 0.2);
``grader.integrations.verl_plugin`` is the old path of `plugin`, kept as an alias with a DeprecationWarning.
"""

from __future__ import annotations

from typing import Any

from grader.integrations.verl.advantages import (
    GRPO_ESTIMATORS,
    PASS_FLAG_KEY,
    ROW_KEY,
    VERL_MAPPING,
    install,
    mixed_rows,
    passed_from_scores,
    preserve_for_loss_agg_mode,
    redistribute_data,
    verl_rows,
    with_pass_flag,
    wrap_compute_advantage,
)
from grader.integrations.verl.versions import SUPPORTED_VERL, VerlVersionError, check_verl_version

__all__ = [
    "GRPO_ESTIMATORS",
    "PASS_FLAG_KEY",
    "ROW_KEY",
    "SUPPORTED_VERL",
    "VERL_MAPPING",
    "VerlVersionError",
    "check_verl_version",
    "install",
    "mixed_rows",
    "passed_from_scores",
    "preserve_for_loss_agg_mode",
    "redistribute_data",
    "verl_rows",
    "with_pass_flag",
    "wrap_compute_advantage",
]


def __getattr__(name: str) -> Any:
    # install_grader patched seven verl functions, private ones included; the migration is one line.
    if name == "install_grader":
        raise AttributeError(
            "grader.integrations.verl.install_grader was removed: call "
            "grader.integrations.verl.plugin.attach(batch_grader, deadline=...) in the trainer process "
            "and set algorithm.adv_estimator=gagar_grpo (optionally reward.reward_manager.name=gagar) "
            "in verl's config"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
