"""Test support: one real llama.cpp server for the whole session (built or reused: grader.llamacpp)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grader.llamacpp import BuildUnavailable, LlamaServer, ensure_binary, ensure_model
from tests.progress import build_progress


@pytest.fixture(scope="session")
def llama_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    """A running llama-server on 127.0.0.1, stopped by PID and process group when the session ends.

    Built on first use with progress on the terminal. Skips (with the reason) where it cannot be built or
    started; never passes silently."""
    try:
        what = "llama-server (llama.cpp, from the llama-cpp-python sdist)"
        with build_progress(request.config, what, "about 4.5 min on 2 cores"):
            binary, model = ensure_binary(), ensure_model()
        server = LlamaServer(binary, model, log_path=tmp_path_factory.mktemp("llama") / "server.log")
        server.start()
    except BuildUnavailable as exc:
        pytest.skip(f"real llama.cpp server unavailable: {exc}")
    try:
        yield server
    finally:
        server.stop()
