"""Deadlines, timeouts and budgets a trainer gives in seconds: checked where they are given, and turned into
waits that neither overflow nor end early.

Python's waits (`threading.Event.wait`, `concurrent.futures.wait`, `threading.Timer`) raise OverflowError
for a timeout past `threading.TIMEOUT_MAX` (about 292 years), `math.inf` included, and quietly wait for
nothing on NaN. So every value is checked where the trainer gives it (a constructor, `attach`, `weights`,
`close`), before anything is changed, and every wait goes through `wait_seconds`:

- None and `math.inf`: no limit (wait until done); a value past `threading.TIMEOUT_MAX`, or an int too
  large for a float, is honoured the same way;
- a negative value: a deadline already past (wait for nothing), where a wait is asked for;
- NaN: refused (ValueError), and so is anything that is not a number (TypeError, a bool included).
"""

from __future__ import annotations

import math
import numbers
import threading

__all__ = ["checked_seconds", "wait_seconds"]


def checked_seconds(value: object, what: str) -> float | None:
    """A number of seconds as given by a trainer, checked.

    Args:
        value: the seconds (an int or a float, NumPy's included), or None.
        what: the argument's name, for the message ("deadline", "timeout", "budget").
    Returns:
        None for None; else the value as a float, `math.inf` for an infinity or an int too large for a float
        (and `-math.inf` for a negative one), negative values kept (each caller says what they mean).
    Raises:
        TypeError: the value is not a number (a bool, a string, ...), named with `what`.
        ValueError: the value is NaN, named with `what`.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} is a number of seconds or None, not {type(value).__name__} {value!r}")
    try:
        seconds = float(value)
    except OverflowError:  # an int past the largest float: a deadline no process lives to see
        return math.inf if value > 0 else -math.inf
    if math.isnan(seconds):
        raise ValueError(f"{what} is a number of seconds or None, not NaN")
    return seconds


def wait_seconds(seconds: float | None) -> float | None:
    """The timeout to hand a wait for `seconds` (a checked value, or one computed from it).

    Returns:
        None (wait until done) for None and for anything past `threading.TIMEOUT_MAX`, infinity included;
        else the seconds, 0 for a negative value.
    """
    if seconds is None or seconds > threading.TIMEOUT_MAX:
        return None
    return max(0.0, seconds)
