"""Every exception class gagar raises to callers derives from `GagarError`: one `except` catches them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import grader
from grader.errors import GagarError

# Control flow that never leaves its package: `exactapply` declines a patch and the workspace hands it to git;
# one exchange with an endpoint fails (`Failure` and its kinds, a reply without choices) and the endpoint
# retries, adapts, or raises `EndpointFailed` with the reason.
INTERNAL = {
    "grader.workspace.exactapply.Declined",
    "grader.graders.llm.completions.NoChoices",
    *(
        f"grader.graders.llm.failures.{name}"
        for name in ("Failure", "StatusFailure", "ConnectionFailure", "Malformed", "NoChoicesFailure")
        + ("Timeout",)
    ),
}


def _gagar_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(grader.__path__, "grader."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
                and not name.startswith("_")
            ):
                found[f"{info.name}.{name}"] = value
    return found


def test_every_gagar_exception_is_a_gagar_error() -> None:
    found = _gagar_exceptions()
    assert "grader.sandbox.recipes.InstallRecipeError" in found and "grader.distill.sft.NotAnExample" in found
    outside = sorted(
        name for name, cls in found.items() if not issubclass(cls, GagarError) and name not in INTERNAL
    )
    assert outside == []


def test_the_old_bases_still_catch_them() -> None:
    from grader.distill.sft import NotAnExample
    from grader.sandbox.recipes import InstallRecipeError

    assert issubclass(InstallRecipeError, ValueError) and issubclass(NotAnExample, ValueError)
