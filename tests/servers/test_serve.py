"""`gagar serve`: one command starts a real llama.cpp server with the shipped model and template, prints the
`--base-url` and `--model` to grade with, and stops cleanly on Ctrl-C (the binary comes from the gagar
cache: the `llama_server` fixture builds it first, or the test skips with the reason)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from grader.graders.llm.prompts import chat_template_path
from grader.servers.llamacpp import LlamaServer, free_port
from tests.conftest import REPO_ROOT


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
            "grader.cli.main",
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
