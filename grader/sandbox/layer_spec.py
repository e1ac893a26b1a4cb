"""What goes into one environment layer (`EnvironmentSpec`): plain data that `environments` builds and
`pins` adjusts to the interpreter a layer gets, so neither of the two names the other for it."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class EnvironmentSpec:
    """What goes into one environment layer."""

    repository: str
    """The repository the environment is for, e.g. "pytest-dev/pytest" (part of the cache key)."""
    version: str
    """The environment's version within the repository, e.g. SWE-bench's instance `version` ("5.4")."""
    python: str | None = None
    """The interpreter asked for ("3.9"); the nearest available one stands in (see `interpreters`)."""
    pip_packages: tuple[str, ...] = ()
    """pip requirements with their pins, installed into the layer's venv."""
    system_packages: tuple[str, ...] = ()
    """Debian packages installed from the mirror with apt-get."""
    requirements_files: tuple[str, ...] = ()
    """Paths in the source tree to `pip install -r`: the first one that exists is used."""
    build_commands: tuple[str, ...] = ()
    """Shell commands run as root in the source tree before the install (e.g. `locale-gen`)."""
    install: str | None = None
    """The install command run in the source tree; `pip install -e` becomes a plain install (see above)."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables set in the layer."""
    uploaded_prior_to: str | None = None
    """Resolve every requirement from PyPI as of this ISO 8601 time (pip's `--uploaded-prior-to`, pip 26),
    so unpinned requirements of an old repository get the versions of its time rather than today's."""
    test_tools: tuple[tuple[str, str], ...] = ()
    """(module, pip requirement) pairs installed last, each only when the module does not import already:
    the test runner and the optional packages a repository's tests import (`pins.adjust` fills them)."""

    @property
    def slug(self) -> str:
        """The tag-safe name of (repository, version), e.g. "pytest-dev__pytest-5.4"."""
        raw = f"{self.repository.replace('/', '__')}-{self.version}".lower()
        return re.sub(r"[^a-z0-9_.-]+", "-", raw).strip(".-")[:100] or "env"
