"""An OpenAI-compatible endpoint for the help examples that name one (`--base-url http://HOST:PORT/v1`): the
scripted server (grader.servers.scripted) on that port, reviewing as a careful model would (list, diff every
candidate, rank by diff size), until it is killed.

    python -m tests.support.example_endpoint PORT
"""

from __future__ import annotations

import sys
import time

from grader.servers.scripted import ScriptedServer, read_every_diff_then_rank


def main(port: int) -> None:
    def policy(request: dict, number: int):  # type: ignore[no-untyped-def]
        return read_every_diff_then_rank(request, [], lambda label, i, n: f"diff {i + 1} of {n} by size")

    with ScriptedServer(policy, port=port):
        print(f"listening on {port}", flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main(int(sys.argv[1]))
