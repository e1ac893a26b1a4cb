"""Which verl releases gagar's verl hooks are written for, checked before any of them is installed.

Its own module because both sides of the verl integration need it: `advantages.install` (which imports no
verl at import time) and `plugin` (which subclasses verl's reward manager on import, and so must check first).
"""

from __future__ import annotations

from grader.errors import GagarError

__all__ = ["SUPPORTED_VERL", "VerlVersionError", "check_verl_version"]

SUPPORTED_VERL = ("0.9.0", "0.10")
"""The verl releases the private hooks of :func:`~grader.integrations.verl.plugin.attach` are written for:
``>=0.9.0,<0.10``."""


class VerlVersionError(GagarError, RuntimeError):
    """The installed verl is outside :data:`SUPPORTED_VERL`."""


def check_verl_version(version: str | None = None) -> str:
    """Fail loudly unless verl's version is in :data:`SUPPORTED_VERL`.

    Args:
        version: the version to check (default: the installed ``verl.__version__``).
    Returns:
        the version checked.
    Raises:
        VerlVersionError: verl is outside the supported range, or its version cannot be read.
    """
    from packaging.version import InvalidVersion, Version

    if version is None:
        import verl

        version = str(getattr(verl, "__version__", ""))
    low, high = SUPPORTED_VERL
    try:
        supported = Version(low) <= Version(version) < Version(high)
    except InvalidVersion:
        supported = False
    if not supported:
        raise VerlVersionError(
            f"gagar's verl hooks support verl >={low},<{high}; the installed verl is {version or 'unknown'}. "
            f"They wrap private verl functions whose behaviour changes between releases: install a "
            f"supported verl (pip install 'verl>={low},<{high}') or a gagar release that supports {version}."
        )
    return version
