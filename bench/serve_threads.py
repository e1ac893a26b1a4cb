"""Tokens per second of the served model (Gemma 3 270M) at each thread count, against one thread as the
baseline, on this machine as it is now (loaded or idle): the figure `gagar serve`'s default thread count rests
on (grader/servers/serve.py, `default_threads`).

    python bench/serve_threads.py [--server llama.cpp|llama-cpp-python] [--rounds 4] [--tokens 64]

Each round starts one server per thread count in turn (1, 2, ... up to the usable cores), sends the same
chat request (a fixed prompt, `max_tokens` tokens, temperature 0) twice (the first warms the prompt cache) and
times the second; rounds alternate the counts so the load moves across all of them alike. It prints the load
average and the free-core count `gagar serve` would pick, each count's median tokens per second and its ratio
to one thread's. Needs the server built (`gagar serve` builds it once).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.servers.llamacpp import LlamaServer, ensure_binary, ensure_model  # noqa: E402
from grader.servers.llamacpp_python import LlamaCppPythonServer, ensure_package  # noqa: E402
from grader.servers.serve import default_threads, usable_cores  # noqa: E402

PROMPT = "List the steps to review a code change, one per line, as a numbered list."


def tokens_per_second(url: str, tokens: int) -> float:
    body = {
        "model": "gemma-3-270m",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": tokens,
        "temperature": 0,
    }
    headers = {"Content-Type": "application/json"}
    data = json.dumps(body).encode()
    request = urllib.request.Request(f"{url}/chat/completions", data=data, headers=headers)
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=600) as reply:
        answer = json.loads(reply.read())
    return answer["usage"]["completion_tokens"] / (time.monotonic() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("llama.cpp", "llama-cpp-python"), default="llama.cpp")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    model = ensure_model()
    counts = list(range(1, usable_cores() + 1))
    load = os.getloadavg()[0]
    print(f"{usable_cores()} usable cores, load average {load:.2f}: gagar serve picks {default_threads()}")
    speeds: dict[int, list[float]] = {n: [] for n in counts}
    for round_ in range(args.rounds):
        for n in counts if round_ % 2 == 0 else reversed(counts):
            if args.server == "llama.cpp":
                server: LlamaServer | LlamaCppPythonServer = LlamaServer(ensure_binary(), model, threads=n)
            else:
                server = LlamaCppPythonServer(ensure_package(), model, threads=n)
            with server:
                tokens_per_second(server.url, args.tokens)
                speeds[n].append(tokens_per_second(server.url, args.tokens))
            print(f"  round {round_ + 1}, {n} thread(s): {speeds[n][-1]:.1f} tokens/s", flush=True)
    base = statistics.median(speeds[1])
    print(f"{'threads':>7}  {'tokens/s (median)':>17}  {'vs 1 thread':>11}")
    for n in counts:
        median = statistics.median(speeds[n])
        print(f"{n:>7}  {median:>17.1f}  {median / base:>10.2f}x")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
