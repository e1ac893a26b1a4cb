"""Probe: average_price writes nothing to stdout or stderr (exit 0), else 1."""

import contextlib
import io
import sys

from inventory.stock import Item, average_price

captured = io.StringIO()
with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
    average_price([Item("bolt", 0.5, 10)])
    average_price([])
print(f"average_price wrote {captured.getvalue()!r}")
sys.exit(1 if captured.getvalue() else 0)
