"""Probe: average_price([]) is the float 0.0 its docstring promises (exit 0), else exit 1."""

import sys

from inventory.stock import average_price

value = average_price([])
print(f"average_price([]) = {value!r} ({type(value).__name__})")
sys.exit(0 if isinstance(value, float) and value == 0.0 else 1)
