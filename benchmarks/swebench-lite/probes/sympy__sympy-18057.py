from sympy import Symbol


class LooksLikeX:
    """An unrelated object that merely prints as x."""

    def __repr__(self):
        return "x"

    __str__ = __repr__


x = Symbol("x")
assert x != LooksLikeX(), "a symbol equals an unrelated object because their reprs match"
assert not (x == LooksLikeX())  # noqa: SIM201 (__eq__ itself, not only __ne__)
assert x == Symbol("x")
