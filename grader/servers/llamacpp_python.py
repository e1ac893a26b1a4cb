"""llama-cpp-python's OpenAI-compatible server on loopback, for tests: build (or reuse) it, start it, stop it.

`python -m llama_cpp.server --chat_format chatml-function-calling` is the common Python way to serve a GGUF
with tool calls. The package is compiled here from its PyPI sdist (the version `grader.servers.llamacpp`
builds
`llama-server` from), with native CPU features off so the wheel runs on any x86_64, and cached with its
server dependencies under `~/.cache/gagar/llama-cpp-python/<version>-<flags hash>/` (`GAGAR_SERVER_CACHE`
moves it): the wheel, and `site-<pins hash>/`, the wheel installed with its `[server]` extra (pinned) by
`pip install --target`. The server runs
on this interpreter with `site/` first on its path, so nothing is installed into the caller's environment.
A later run reuses both; without the cache it builds again (minutes: see the README).

    python -m grader.servers.llamacpp_python build      # build or reuse; prints the package folder
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from grader.servers.llamacpp import (
    LLAMA_CPP_PYTHON,
    MODEL_ALIAS,
    BuildUnavailable,
    LocalServer,
    build_estimate,
    cache_root,
    download_source,
    ensure_model,
    free_port,
    log,
    minutes,
    run_logged,
)
from grader.util.filelock import file_lock

CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF",  # a wheel for any x86_64 (some VMs advertise AMX and fault on it)
    "-DLLAVA_BUILD=OFF",  # multimodal: loaded only by image chat formats; a third of the build
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_OPENSSL=OFF",
)
SERVER_PINS = (
    # The server's own dependencies at the versions it was tested with here: its extra leaves them open.
    "fastapi==0.165.0",
    "uvicorn==0.55.0",
    "sse-starlette==3.7.1",
    "pydantic-settings==2.14.1",
)
CHAT_FORMAT = "chatml-function-calling"
WHEEL_CORE_SECONDS = 430.0
"""CPU time of the wheel's build: 215 s on 2 idle cores (docs/development.md), scaled by `build_estimate`."""


def wheel_key() -> str:
    """The wheel's cache folder: the version and a hash of the compile flags."""
    return f"{LLAMA_CPP_PYTHON}-{hashlib.sha256(' '.join(CMAKE_ARGS).encode()).hexdigest()[:10]}"


def site_key() -> str:
    """The installed package's folder in the wheel's: a hash of the pins and the Python version."""
    parts = [*SERVER_PINS, f"py{sys.version_info[0]}.{sys.version_info[1]}"]
    return f"site-{hashlib.sha256(' '.join(parts).encode()).hexdigest()[:10]}"


def ensure_package() -> Path:
    """The folder holding `llama_cpp` and its server's dependencies, built first if absent (one build at a
    time per cache, under a file lock; the folder appears whole or not at all; the steps are logged at INFO
    on `grader.servers.llamacpp`).

    Returns:
        The folder to put first on the server's `PYTHONPATH`.

    Raises:
        BuildUnavailable: no compiler or cmake, or pip or the compile failed (the message names its log).
    """
    home = cache_root() / "llama-cpp-python" / wheel_key()
    site = home / site_key()
    if (site / "llama_cpp").is_dir():
        log.debug("reusing llama-cpp-python built before: %s", site)
        return site
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise BuildUnavailable(f"no {tool} on PATH to build llama-cpp-python (pip install cmake ninja)")
    lock = home.parent / f"{wheel_key()}.lock"
    with file_lock(
        lock,
        waiting=lambda: log.info("another process is building llama-cpp-python (%s): waiting for it", lock),
    ):
        if (site / "llama_cpp").is_dir():  # another process built it while this one waited
            return site
        started = time.monotonic()
        home.mkdir(parents=True, exist_ok=True)
        output = home / "build.log"
        output.write_bytes(b"")
        wheels = sorted(home.glob("llama_cpp_python-*.whl"))
        if not wheels:
            log.info(
                "building llama-cpp-python %s into %s, once for this machine: %s",
                LLAMA_CPP_PYTHON,
                home,
                build_estimate(WHEEL_CORE_SECONDS),
            )
            with tempfile.TemporaryDirectory(prefix="gagar-llama-cpp-python-") as tmp:
                work = Path(tmp)
                source = download_source(work, output)
                env = {
                    **os.environ,
                    "CMAKE_ARGS": " ".join(CMAKE_ARGS),
                    "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2),
                }
                log.info("compiling the wheel (llama.cpp as shared libraries)")
                wheel_cmd = [
                    sys.executable,
                    "-m",
                    "pip",
                    "wheel",
                    "-v",
                    "--no-deps",
                    "-w",
                    str(work / "dist"),
                ]
                run_logged([*wheel_cmd, str(source)], work, output, env=env)
                (built,) = (work / "dist").glob("llama_cpp_python-*.whl")
                shutil.copy2(built, home / f"{built.name}.partial")
                (home / f"{built.name}.partial").replace(home / built.name)
            wheels = sorted(home.glob("llama_cpp_python-*.whl"))
        log.info("installing it with its server's dependencies (pip install --target)")
        partial = site.with_name(site.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        install = [sys.executable, "-m", "pip", "install", "--no-compile", "--target", str(partial)]
        run_logged([*install, f"{wheels[-1]}[server]", *SERVER_PINS], home, output)
        partial.replace(site)
        log.info(
            "llama-cpp-python ready in %s; kept at %s, where every later run reuses it (GAGAR_SERVER_CACHE "
            "moves the cache)",
            minutes(time.monotonic() - started),
            site,
        )
    return site


@dataclass
class LlamaCppPythonServer(LocalServer):
    """`python -m llama_cpp.server` on 127.0.0.1 in its own process group, serving `model` under the name
    `alias` with `chat_format`; `stop()` ends the group."""

    site: Path
    """The package folder (`ensure_package`)."""
    model: Path
    context: int = 8192
    threads: int = 2
    chat_format: str = CHAT_FORMAT
    alias: str = MODEL_ALIAS
    log_path: Path | None = None
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    name = "llama_cpp.server"
    startup_seconds = 120.0  # imports and the model load take a few seconds

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-s",  # the user's site-packages would shadow the pinned server dependencies
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model),
            "--model_alias",
            self.alias,
            "--chat_format",
            self.chat_format,
            "--n_ctx",
            str(self.context),
            "--n_threads",
            str(self.threads),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]

    def environment(self) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(self.site), os.environ.get("PYTHONPATH")) if p)
        return {**os.environ, "PYTHONPATH": path}

    def ready(self) -> bool:
        """Ready once it lists its model."""
        try:
            with urllib.request.urlopen(f"{self.url}/models", timeout=2) as r:
                return bool(json.loads(r.read()).get("data"))
        except (OSError, ValueError):
            return False


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args != ["build"]:
        print("usage: python -m grader.servers.llamacpp_python build", file=sys.stderr)
        return 2
    try:
        logging.basicConfig(level=logging.INFO, format="%(message)s")
        print(ensure_package())
        print(ensure_model())
    except BuildUnavailable as exc:
        print(f"llama-cpp-python unavailable: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
