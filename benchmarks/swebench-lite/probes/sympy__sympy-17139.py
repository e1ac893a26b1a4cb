from sympy import Symbol, cos, simplify

x = Symbol("x")
y = Symbol("y", imaginary=True)
# A non-real exponent other than I itself must not be compared with 0 either.
simplify(cos(x) ** y)
simplify(cos(x) ** (2 * y))
