"""Test support: one real llama.cpp server for the whole session (built or reused: grader.llamacpp)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from grader.llamacpp import BuildUnavailable, LlamaServer, ensure_binary, ensure_model


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A running llama-server on 127.0.0.1, stopped by PID and process group when the session ends.

    Skips (with the reason) where it cannot be built or started; never passes silently."""
    try:
        server = LlamaServer(
            ensure_binary(), ensure_model(), log_path=tmp_path_factory.mktemp("llama") / "server.log"
        )
        server.start()
    except BuildUnavailable as exc:
        pytest.skip(f"real llama.cpp server unavailable: {exc}")
    try:
        yield server
    finally:
        server.stop()
