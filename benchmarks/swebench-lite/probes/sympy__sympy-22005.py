from sympy import symbols
from sympy.solvers.polysys import solve_poly_system

x = symbols("x")
# More equations than unknowns, one common root: still a zero-dimensional system.
result = solve_poly_system([x - 1, x**2 - 1], x)
assert result == [(1,)], result
