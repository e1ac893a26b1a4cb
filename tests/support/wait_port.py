"""Wait until something answers on 127.0.0.1:PORT (a help example's server), for at most SECONDS.

    python -m tests.support.wait_port PORT SECONDS [--models]

With --models, wait until GET /v1/models answers and print its JSON (the model an OpenAI-compatible server
serves). Exits 0 once it answers, 1 when the time is up.
"""

from __future__ import annotations

import json
import socket
import sys
import time
import urllib.request


def main(argv: list[str]) -> int:
    port, seconds, models = int(argv[0]), float(argv[1]), "--models" in argv
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if models:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as reply:
                    listed = json.loads(reply.read())
                print("models: " + ", ".join(str(m.get("id")) for m in listed.get("data", [])))
            else:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return 0
        except (OSError, ValueError):
            time.sleep(0.5)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
