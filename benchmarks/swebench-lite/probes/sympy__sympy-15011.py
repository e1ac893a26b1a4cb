from sympy import MatrixSymbol, lambdify

v = MatrixSymbol("{v}", 2, 1)
# A MatrixSymbol keeps the name it was given; only lambdify's generated code may rename it.
assert v.name == "{v}", v.name
f = lambdify(v, v, dummify=True)
assert f is not None
