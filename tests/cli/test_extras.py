"""The extras install what their documented use needs, and a test that cannot run names the missing package
(issue 37.9): `pip install 'gagar[ray]'` must be enough to connect to a cluster (Ray Client, ray[client])."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT


def test_the_ray_extra_brings_ray_client() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(requirement.startswith("ray[client]") for requirement in extras["ray"]), extras["ray"]


def test_the_cluster_tests_skip_naming_the_package_ray_client_lacks() -> None:
    # grpcio hidden, as on a machine with the minimal ray: the module must skip, not error at connect().
    hide = "import sys; sys.modules['grpc'] = None; import pytest; "
    module = "tests/integrations/test_ray_cluster.py"
    run = f"sys.exit(pytest.main(['-q', '-rs', '-p', 'no:cacheprovider', {module!r}]))"
    proc = subprocess.run(
        [sys.executable, "-c", hide + run], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )
    assert "skipped" in proc.stdout and "error" not in proc.stdout.lower(), proc.stdout
    assert "Ray Client needs the package grpcio: pip install 'gagar[ray]'" in proc.stdout
