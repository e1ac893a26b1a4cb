from sympy import Function, Mul, sin, symbols

x, y = symbols("x y")
expr = sin(x) + x * y
# Asking for a given type still finds the composite expressions of that type.
assert expr.atoms(sin) == {sin(x)}, expr.atoms(sin)
assert expr.atoms(Mul) == {x * y}, expr.atoms(Mul)
assert expr.atoms(Function) == {sin(x)}, expr.atoms(Function)
assert expr.atoms() == {x, y}, expr.atoms()
